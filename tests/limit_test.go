package tests

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// limiterKind builds one limiter of an algorithm on a server.
type limiterKind struct {
	name       string
	policyName string
	make       func(t *testing.T, c rueidis.Client, prefix string, lim int64, w time.Duration) limit.Limiter
}

var limiterKinds = []limiterKind{
	{"sliding-window", "sw", func(t *testing.T, c rueidis.Client, prefix string, lim int64, w time.Duration) limit.Limiter {
		st, err := store.New(ctxT(t), c, store.Window{Length: w, Bucket: w / 10}, store.WithPrefix(prefix))
		require.NoError(t, err)
		l, err := limit.NewSlidingWindow(st, "sw", lim)
		require.NoError(t, err)
		return l
	}},
	{"log", "log", func(t *testing.T, c rueidis.Client, prefix string, lim int64, w time.Duration) limit.Limiter {
		l, err := limit.NewLog(c, "log", prefix, lim, w)
		require.NoError(t, err)
		return l
	}},
	{"fixed-window", "fixed", func(t *testing.T, c rueidis.Client, prefix string, lim int64, w time.Duration) limit.Limiter {
		l, err := limit.NewFixedWindow(c, "fixed", prefix, lim, w)
		require.NoError(t, err)
		return l
	}},
}

// forEachLimiter runs fn for every algorithm on every plain-Redis-compatible
// server (the limiters' own scripts use only core commands).
func forEachLimiter(t *testing.T, fn func(t *testing.T, lk limiterKind, srv *harness.Server)) {
	for _, kind := range []harness.Kind{harness.Redis70, harness.Redis80, harness.Valkey} {
		for _, lk := range limiterKinds {
			t.Run(string(kind)+"/"+lk.name, func(t *testing.T) {
				fn(t, lk, harness.Shared(t, kind))
			})
		}
	}
}

// TestLimiterExactUnderConcurrency: exactly the limit is admitted.
func TestLimiterExactUnderConcurrency(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, lk limiterKind, srv *harness.Server) {
		l := lk.make(t, srv.Client(t), harness.Prefix(t), 10, time.Minute)
		var ok atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Allow(context.Background(), "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					ok.Add(1)
				} else if d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
					t.Errorf("retry after %v", d.RetryAfter)
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 10, ok.Load())
	})
}

// TestLimiterRetryAfterHonest: a retry at RetryAfter succeeds, one a
// millisecond before fails; and a cost over the limit never fits.
func TestLimiterRetryAfterHonest(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, lk limiterKind, srv *harness.Server) {
		ctx := ctxT(t)
		w := 10 * time.Second
		l := lk.make(t, srv.Client(t), harness.Prefix(t), 3, w)
		t0 := time.Now().Truncate(w)
		for _, at := range []time.Duration{500 * time.Millisecond, 3 * time.Second, 4200 * time.Millisecond} {
			d, err := l.AllowAt(ctx, t0.Add(at), "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		now := t0.Add(6 * time.Second)
		d, err := l.AllowAt(ctx, now, "k", 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Zero(t, d.Remaining)
		require.EqualValues(t, 3, d.Limit)
		require.Greater(t, d.RetryAfter, time.Duration(0))
		require.LessOrEqual(t, d.RetryAfter, w)
		require.GreaterOrEqual(t, d.ResetAfter, d.RetryAfter)
		before, err := l.AllowAt(ctx, now.Add(d.RetryAfter-time.Millisecond), "k", 1)
		require.NoError(t, err)
		require.False(t, before.Allowed, "admitted before RetryAfter (%v)", d.RetryAfter)
		at, err := l.AllowAt(ctx, now.Add(d.RetryAfter), "k", 1)
		require.NoError(t, err)
		require.True(t, at.Allowed, "refused at RetryAfter (%v)", d.RetryAfter)
		never, err := l.AllowAt(ctx, now.Add(d.RetryAfter), "k2", 4)
		require.NoError(t, err)
		require.False(t, never.Allowed)
		require.Equal(t, time.Duration(-1), never.RetryAfter)
	})
}

// TestLimiterRefusalsCostNothing: refused requests leave no trace: the key's
// memory and (for the log) its member count do not move.
func TestLimiterRefusalsCostNothing(t *testing.T) {
	forEachLimiter(t, func(t *testing.T, lk limiterKind, srv *harness.Server) {
		ctx := ctxT(t)
		c := srv.Client(t)
		prefix := harness.Prefix(t)
		l := lk.make(t, c, prefix, 5, time.Minute)
		for i := 0; i < 5; i++ {
			d, err := l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		mem := func() int64 {
			n, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(prefix+lk.policyName+":k").Args("SAMPLES", "0").Build()).AsInt64()
			require.NoError(t, err)
			return n
		}
		before := mem()
		for i := 0; i < 100; i++ {
			d, err := l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
		}
		require.Equal(t, before, mem(), "refused requests used memory")
		if lk.name == "log" {
			n, err := c.Do(ctx, c.B().Zcard().Key(prefix+"log:k").Build()).AsInt64()
			require.NoError(t, err)
			require.EqualValues(t, 5, n)
		}
		pttl, err := c.Do(ctx, c.B().Pttl().Key(prefix+lk.policyName+":k").Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, int64(0))
		require.LessOrEqual(t, pttl, time.Minute.Milliseconds())
	})
}

// TestLimiterMemory measures memory per key: the log at 100, 1,000 and 10,000
// admitted events, the sliding window and the fixed window at the same rates.
// It logs the figures the README's trade-off table quotes, and asserts the
// memory target (memory is exact, not timed): at 1,000 events a sliding-window
// counter takes at least 100 times less than the log.
func TestLimiterMemory(t *testing.T) {
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	for _, events := range []int{100, 1000, 10000} {
		size := map[string]int64{}
		for _, lk := range limiterKinds {
			prefix := harness.Prefix(t) + lk.name + ":"
			l := lk.make(t, c, prefix, int64(events), time.Hour)
			t0 := time.Now().Add(-59 * time.Minute)
			for i := 0; i < events; i++ { // spread over the window, in time order
				_, err := l.AllowAt(ctx, t0.Add(time.Duration(i)*59*time.Minute/time.Duration(events)), "k", 1)
				require.NoError(t, err)
			}
			n, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(prefix+lk.policyName+":k").Args("SAMPLES", "0").Build()).AsInt64()
			require.NoError(t, err)
			size[lk.name] = n
			t.Logf("%s: %d events in the window: MEMORY USAGE %d bytes (%.1f per event)", lk.name, events, n, float64(n)/float64(events))
		}
		t.Logf("%d events: the log takes %.0fx the sliding window's memory", events, float64(size["log"])/float64(size["sliding-window"]))
		if events == 1000 {
			require.GreaterOrEqual(t, size["log"], 100*size["sliding-window"])
		}
	}
}
