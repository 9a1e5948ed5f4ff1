package tests

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/figures"
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

// redisKeys are the Redis keys a limiter of this kind keeps key's state in
// (a sliding window's are its counter's: with the plain hash, its buckets'
// hash and the key's head).
func (lk limiterKind) redisKeys(t *testing.T, c rueidis.Client, prefix, key string, w time.Duration) []string {
	if lk.name == "sliding-window" {
		st, err := store.New(ctxT(t), c, store.Window{Length: w, Bucket: w / 10}, store.WithPrefix(prefix))
		require.NoError(t, err)
		return counterKeys(t, st.Sub(lk.policyName), key)
	}
	return []string{prefix + "{" + key + "}:" + lk.policyName}
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
		l, err := limit.NewLog(c, "log", lim, w, limit.WithPrefix(prefix))
		require.NoError(t, err)
		return l
	}},
	{"fixed-window", "fixed", func(t *testing.T, c rueidis.Client, prefix string, lim int64, w time.Duration) limit.Limiter {
		l, err := limit.NewFixedWindow(c, "fixed", lim, w, limit.WithPrefix(prefix))
		require.NoError(t, err)
		return l
	}},
}

// allow asks l for n units of key. The fixed window is asked at the instant
// at (the client's clock, the same for every call of a test): on the
// server's clock a window edge falling between two calls would reset its
// count. The other algorithms use the server's clock.
func (lk limiterKind) allow(ctx context.Context, l limit.Limiter, at time.Time, key string, n int64) (store.Decision, error) {
	if lk.name == "fixed-window" {
		return l.AllowAt(ctx, at, key, n)
	}
	return l.Allow(ctx, key, n)
}

// windowStart is an instant 1 ms into the current window of length w, so
// that a fixed window asked at it has nearly all of w left.
func windowStart(w time.Duration) time.Time { return time.Now().Truncate(w).Add(time.Millisecond) }

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
	t.Parallel()
	forEachLimiter(t, func(t *testing.T, lk limiterKind, srv *harness.Server) {
		l := lk.make(t, srv.Client(t), harness.Prefix(t), 10, time.Minute)
		at := windowStart(time.Minute)
		var ok atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := lk.allow(context.Background(), l, at, "k", 1)
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

// TestLimiterAtTwoToThe53: at the largest limit, 2^53, a cost of 2^53 on a
// count of 1 is refused. 1 + 2^53 is a sum that doubles round to 2^53, so a
// script that adds before it compares admits it. (The log takes costs of at
// most 1,000 and never holds 2^53 members: it is left out.)
func TestLimiterAtTwoToThe53(t *testing.T) {
	t.Parallel()
	forEachLimiter(t, func(t *testing.T, lk limiterKind, srv *harness.Server) {
		if lk.name == "log" {
			t.Skip("the log takes costs of at most 1,000")
		}
		ctx := ctxT(t)
		const max = int64(1) << 53
		l := lk.make(t, srv.Client(t), harness.Prefix(t), max, time.Minute)
		at := windowStart(time.Minute)
		d, err := lk.allow(ctx, l, at, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		d, err = lk.allow(ctx, l, at, "k", max)
		require.NoError(t, err)
		require.False(t, d.Allowed, "a count of 1 + 2^53 admitted under a limit of 2^53: %+v", d)
		require.EqualValues(t, 1, d.Sum, "%+v", d)
		d, err = lk.allow(ctx, l, at, "k", max-1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Equal(t, max, d.Sum)
	})
}

// TestLimiterRetryAfterHonest: a retry at RetryAfter succeeds, one a
// millisecond before fails; and a cost over the limit never fits.
func TestLimiterRetryAfterHonest(t *testing.T) {
	t.Parallel()
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
// content (DUMP) and (for the log) its member count do not move.
func TestLimiterRefusalsCostNothing(t *testing.T) {
	t.Parallel()
	forEachLimiter(t, func(t *testing.T, lk limiterKind, srv *harness.Server) {
		ctx := ctxT(t)
		c := srv.Client(t)
		prefix := harness.Prefix(t)
		l := lk.make(t, c, prefix, 5, time.Minute)
		at := windowStart(time.Minute)
		for i := 0; i < 5; i++ {
			d, err := lk.allow(ctx, l, at, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		// DUMP is the key's exact content: MEMORY USAGE, rounded up to the
		// allocator's size classes, missed a refused request's small write.
		ks := lk.redisKeys(t, c, prefix, "k", time.Minute)
		dump := func() []string { return dump(t, c, ks...) }
		before := dump()
		for i := 0; i < 100; i++ {
			d, err := lk.allow(ctx, l, at, "k", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed)
		}
		require.Equal(t, before, dump(), "a refused request changed the key")
		if lk.name == "log" {
			n, err := c.Do(ctx, c.B().Zcard().Key(ks[0]).Build()).AsInt64()
			require.NoError(t, err)
			require.EqualValues(t, 5, n)
		}
		for _, k := range ks {
			pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			require.NoError(t, err)
			if pttl == -2 && len(ks) > 1 && k == ks[0] {
				continue // (the plain hash's buckets are in its head until a bucket has gone by)
			}
			require.Greater(t, pttl, int64(0), k)
			require.LessOrEqual(t, pttl, time.Minute.Milliseconds(), k)
		}
	})
}

// TestLimiterMemory measures memory per key: the log at 100, 1,000 and 10,000
// admitted events, the sliding window, the fixed window and the GCRA (a rate
// of that many per hour, with a burst as large) at the same rates.
// It logs the figures docs/ratelimiting.md's trade-off table quotes, and asserts the
// memory target (memory is exact, not timed): at 1,000 events a sliding-window
// counter takes at least 100 times less than the log.
func TestLimiterMemory(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxLong(t) // 44,400 sequential calls (ctxT's 2 minutes ran out at 120 s)
	server := srv.Version(t)
	for _, events := range []int{100, 1000, 10000} {
		size := map[string]int64{}
		for _, lk := range append(slices.Clip(limiterKinds), gcraKind) {
			prefix := harness.Prefix(t) + lk.name + ":"
			l := lk.make(t, c, prefix, int64(events), time.Hour)
			t0 := time.Now().Add(-59 * time.Minute)
			for i := 0; i < events; i++ { // spread over the window, in time order
				_, err := l.AllowAt(ctx, t0.Add(time.Duration(i)*59*time.Minute/time.Duration(events)), "k", 1)
				require.NoError(t, err)
			}
			var n int64
			for _, k := range lk.redisKeys(t, c, prefix, "k", time.Hour) {
				m, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(k).Args("SAMPLES", "0").Build()).AsInt64()
				require.NoError(t, err)
				n += m
			}
			size[lk.name] = n
			t.Logf("%s: %d events in the window: MEMORY USAGE %d bytes (%.1f per event)", lk.name, events, n, float64(n)/float64(events))
			figures.Check(t, fmt.Sprintf("limiters/%s/%d", lk.name, events), figures.Figure{Value: float64(n), Unit: "B",
				How: "MEMORY USAGE SAMPLES 0 of one key, events spread over a one-hour window", Server: server}, 0.03)
		}
		ratio := float64(size["log"]) / float64(size["sliding-window"])
		t.Logf("%d events: the log takes %.0fx the sliding window's memory", events, ratio)
		if events == 1000 {
			require.GreaterOrEqual(t, size["log"], 100*size["sliding-window"])
			figures.Check(t, "limiters/log-vs-sliding/1000", figures.Figure{Value: math.Round(ratio), Unit: "x", Server: server}, 0.03)
		}
	}
}
