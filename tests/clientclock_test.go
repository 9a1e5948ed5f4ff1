package tests

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/store"
)

// TestClientClock: with store.WithClientClock, the plain methods (Add, Sum,
// Allow, Inspect) run at the client's instant, not the server's: a write three
// seconds later on the client's clock takes a bucket of its own, and eleven
// seconds later the first write has left the window. The real time the test
// takes is well under one bucket, so only the client's clock can move the
// window this way.
func TestClientClock(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		var now atomic.Int64
		now.Store(time.Now().Truncate(time.Second).Add(500 * time.Millisecond).UnixNano())
		clock := func() time.Time { return time.Unix(0, now.Load()) }
		start := time.Now()
		s, _ := newStore(t, tg, w, store.WithClientClock(clock))
		ctx := ctxT(t)

		n, err := s.Add(ctx, "k", 5)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
		// Three buckets later on the client's clock: the write lands there.
		now.Add(int64(3 * time.Second))
		n, err = s.Add(ctx, "k", 2)
		require.NoError(t, err)
		require.EqualValues(t, 7, n)
		snap, err := s.Inspect(ctx, "k")
		require.NoError(t, err)
		require.Len(t, snap.Buckets, 2, "two writes three buckets apart on the client's clock: two buckets")
		// Past the first write's window on the client's clock: only the
		// second write is left.
		now.Add(int64(8 * time.Second))
		n, err = s.Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "the client clock's window")
		r, err := s.Allow(ctx, "k", 3, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.EqualValues(t, 3, r.Sum)
		if d := time.Since(start); d > 2*time.Second {
			t.Logf("the test took %v of real time: a slow machine; the client clock moved 11 s", d)
		}
	})
}
