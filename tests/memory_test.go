package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
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

// TestMemoryPerCounter measures each backend's memory per counter as the
// server's used_memory grows over 10,000 full counters (1,000 at 600 buckets;
// MEMORY USAGE under-reports TairHash), at 10, 60 and 600 buckets, on a fresh
// server. It logs the
// figures the README's backend table quotes; it asserts only the plain hash's
// 12-bytes-per-bucket bound.
func TestMemoryPerCounter(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := harness.Fresh(t, tg.kind)
		c := srv.Client(t)
		ctx := ctxT(t)
		for _, buckets := range []int{10, 60, 600} {
			w := store.Window{Length: time.Duration(buckets) * time.Minute, Bucket: time.Minute}
			s, err := store.New(ctx, c, w, store.WithBackend(tg.backend), store.WithPrefix(fmt.Sprintf("m%d:", buckets)))
			require.NoError(t, err)
			before := usedMemory(t, c)
			// 10,000 counters at 10 and 60 buckets; 1,000 at 600 (six
			// million writes would take minutes).
			counters := 10000
			if buckets == 600 {
				counters = 1000
			}
			now := time.Now()
			var fns []func()
			for k := 0; k < counters; k += 10 {
				// Oldest bucket first: a write at an earlier instant would take
				// newer buckets for stale ones.
				fns = append(fns, func() {
					for key := k; key < k+10; key++ {
						for i := buckets - 1; i >= 0; i-- {
							at := now.Add(-time.Duration(i) * time.Minute)
							if err := s.AddNoSumAt(ctx, at, strconv.Itoa(key), int64(i+1)); err != nil {
								t.Error(err)
								return
							}
						}
					}
				})
			}
			parallel(fns)
			per := float64(usedMemory(t, c)-before) / float64(counters)
			t.Logf("%s: %d buckets: %.0f bytes per counter (%.1f per bucket), used_memory delta over %d counters",
				tg.name, buckets, per, per/float64(buckets), counters)
			if !tg.wantFieldTTL && buckets == 60 {
				// The key itself costs about 50 bytes more than its hash.
				require.Less(t, per/float64(buckets), 12.0+60.0/float64(buckets))
			}
		}
	})
}

func usedMemory(t testing.TB, c rueidis.Client) int64 {
	info, err := c.Do(ctxT(t), c.B().Info().Section("memory").Build()).ToString()
	require.NoError(t, err)
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}
