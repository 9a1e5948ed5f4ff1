package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestShapesNeverMeet: two stores of different windows under one prefix keep
// different counters for one key (the shape is part of the Redis key), on
// every backend: neither corrupts the other.
func TestShapesNeverMeet(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		a, srv := newStore(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second})
		b, err := store.New(ctxT(t), srv.Client(t), store.Window{Length: time.Minute, Bucket: 5 * time.Second},
			store.WithPrefix(prefixOf(t, a)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		ctx := ctxT(t)
		now := time.Now()
		for i := 0; i < 20; i++ {
			_, err := a.At(now.Add(time.Duration(i)*300*time.Millisecond)).Add(ctx, "k", 2)
			require.NoError(t, err)
			_, err = b.At(now.Add(time.Duration(i)*300*time.Millisecond)).Add(ctx, "k", 3)
			require.NoError(t, err)
		}
		at := now.Add(6 * time.Second)
		na, err := a.At(at).Sum(ctx, "k")
		require.NoError(t, err)
		nb, err := b.At(at).Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 40, na)
		require.EqualValues(t, 60, nb)
		ka, _ := hook.RedisKey(a, "k")
		kb, _ := hook.RedisKey(b, "k")
		require.NotEqual(t, ka, kb)
	})
}

// TestNegativeSums pins Allow's semantics on a negative sum (credits): a cost
// fits when cost <= limit and sum + cost <= limit; no cost above the limit
// ever fits; Remaining stays within [0, limit].
func TestNegativeSums(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		now := time.Now()
		_, err := s.At(now).Add(ctx, "credit", -5)
		require.NoError(t, err)
		r, err := s.At(now).Allow(ctx, "credit", 3, 0)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.EqualValues(t, -5, r.Sum)
		require.EqualValues(t, 3, r.Remaining, "remaining never exceeds the limit")
		r, err = s.At(now).Allow(ctx, "credit", 3, 4)
		require.NoError(t, err)
		require.False(t, r.Allowed, "a cost above the limit never fits, credits or not")
		require.Equal(t, time.Duration(-1), r.RetryAfter)
		r, err = s.At(now).Allow(ctx, "credit", 3, 3)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.EqualValues(t, -2, r.Sum)
		require.EqualValues(t, 3, r.Remaining)
		r, err = s.At(now).Allow(ctx, "credit", 3, 3)
		require.NoError(t, err)
		require.True(t, r.Allowed, "-2 + 3 <= 3")
		require.EqualValues(t, 1, r.Sum)
		require.EqualValues(t, 2, r.Remaining)
	})
}

// TestHeadLivesForItsLongestWindow: one key's windows share a head on the
// plain hash, which holds each window's running total and current bucket.
// The head must live until the last of its windows' current buckets leaves,
// whichever window was written last: a head that expired with its shortest
// window would take the longer windows' current buckets with it. The
// shortest window is written with the others, as it starts a new bucket and
// after it has passed whole (the limits in the head's order, then in
// another), and alone. Real time, about 2 s.
func TestHeadLivesForItsLongestWindow(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ss := policyStores(t, tg, store.Window{Length: 400 * time.Millisecond, Bucket: 100 * time.Millisecond},
			store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		both := func(order ...int) {
			t.Helper()
			var ps []store.Quota
			for _, i := range order {
				ps = append(ps, store.Quota{Store: ss[i], Key: "k", Limit: 100})
			}
			d, err := store.AllowAll(ctx, 1, ps...)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		long := func(want int64, when string) {
			t.Helper()
			sum, err := ss[1].Sum(ctx, "k")
			require.NoError(t, err)
			require.EqualValues(t, want, sum, "the minute's sum %s", when)
		}
		both(0, 1)                         // the head written new
		time.Sleep(150 * time.Millisecond) // the short window's bucket moves on
		both(0, 1)                         // (the head's records in the limits' order)
		time.Sleep(600 * time.Millisecond) // the short window passes whole
		long(2, "once the short window has passed")
		both(1, 0) // (the limits in another order than the head's records)
		time.Sleep(600 * time.Millisecond)
		long(3, "once the short window, written in another order, has passed")
		_, err := ss[0].Add(ctx, "k", 1) // the short window alone
		require.NoError(t, err)
		time.Sleep(600 * time.Millisecond)
		long(3, "once the short window, written alone, has passed")
	})
}

// TestHeadExpiryCoversEveryWindow: on the plain hash, the head the windows
// of one key share lives as long as its longest-lived record: a write to
// the short window alone (a fresh start, then a move) after one to the long
// window leaves the long window's count, whose current bucket only the head
// holds, once the short window has emptied.
func TestHeadExpiryCoversEveryWindow(t *testing.T) {
	for _, tg := range plainTargets() {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			srv := harness.Shared(t, tg.kind)
			opts := []store.Option{store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend)}
			c := srv.Client(t)
			short, err := store.New(ctxT(t), c, store.Window{Length: time.Second, Bucket: 100 * time.Millisecond}, opts...)
			require.NoError(t, err)
			long, err := store.New(ctxT(t), c, store.Window{Length: 20 * time.Second, Bucket: 10 * time.Second}, opts...)
			require.NoError(t, err)
			ctx := ctxT(t)
			_, err = long.Add(ctx, "k", 7)
			require.NoError(t, err)
			longAt := time.Now() // the long count lives at least 10 s past this
			for range 3 {
				_, err = short.Add(ctx, "k", 1)
				require.NoError(t, err)
				time.Sleep(150 * time.Millisecond)
			}
			shortAt := time.Now()
			time.Sleep(2*time.Second - time.Since(shortAt)) // the short window's buckets, and its expiry, are past
			n, err := long.Sum(ctx, "k")
			require.NoError(t, err)
			if time.Since(longAt) < 10*time.Second {
				require.EqualValues(t, 7, n, "the long window lost its count with the short window's expiry")
			}
			n, err = short.Sum(ctx, "k")
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}
