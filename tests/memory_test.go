package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/store"
)

// TestFieldEncodingMemory measures MEMORY USAGE of a full 60-bucket counter
// (the figure in fieldcodec's package doc) on every backend, and logs it. Memory
// is exact, not timed, so the bound is safe to assert.
func TestFieldEncodingMemory(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 6 * time.Minute, Bucket: 6 * time.Second}
		s, srv := newStore(t, tg, w)
		ctx := ctxT(t)
		c := srv.Client(t)
		t0 := time.Now().Truncate(w.Bucket).Add(-w.Length + w.Bucket)
		for i := 0; i < 60; i++ {
			_, err := s.AddAt(ctx, t0.Add(time.Duration(i)*w.Bucket), "mem", int64(i%60+1))
			require.NoError(t, err)
		}
		rk, _ := s.RedisKey("mem")
		n, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(rk).Args("SAMPLES", "0").Build()).AsInt64()
		require.NoError(t, err)
		snap, err := s.Inspect(ctx, "mem")
		require.NoError(t, err)
		require.Len(t, snap.Buckets, 60)
		t.Logf("%s: MEMORY USAGE of a 60-bucket counter: %d bytes (%.1f per bucket)", tg.name, n, float64(n)/60)
		// Field TTLs cost memory of their own (Redis 8 keeps a small hash with
		// TTLs as "listpackex"), and TairHash's MEMORY USAGE under-reports; the
		// 12-byte bound is the plain hash's.
		if !tg.wantFieldTTL {
			require.LessOrEqual(t, n, int64(12*60), "more than 12 bytes per bucket")
		}
	})
}
