package tests

import (
	"context"
	"errors"
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

// cachedKinds build each limiter the refusal cache serves, with cache c and
// an observer of its script calls: limit 5 per 2 s.
var cachedKinds = []struct {
	name string
	make func(t *testing.T, cl rueidis.Client, prefix string, c *limit.RefusalCache, obs store.Observer) limit.Limiter
}{
	{"sliding-window", func(t *testing.T, cl rueidis.Client, prefix string, c *limit.RefusalCache, obs store.Observer) limit.Limiter {
		st, err := store.New(ctxT(t), cl, store.Window{Length: 2 * time.Second, Bucket: 200 * time.Millisecond},
			store.WithPrefix(prefix), store.WithObserver(obs))
		require.NoError(t, err)
		l, err := limit.NewSlidingWindow(st, "sw", 5, limit.WithRefusalCache(c))
		require.NoError(t, err)
		return l
	}},
	{"log", func(t *testing.T, cl rueidis.Client, prefix string, c *limit.RefusalCache, obs store.Observer) limit.Limiter {
		l, err := limit.NewLog(cl, "log", 5, 2*time.Second, limit.WithPrefix(prefix), limit.WithObserver(obs), limit.WithRefusalCache(c))
		require.NoError(t, err)
		return l
	}},
	{"gcra", func(t *testing.T, cl rueidis.Client, prefix string, c *limit.RefusalCache, obs store.Observer) limit.Limiter {
		// (5 per 20 s: a refusal lasts up to 4 s, longer than the checks after
		// the race take on a loaded machine.)
		l, err := limit.NewGCRA(cl, "gcra", 5, 20*time.Second, 5, limit.WithPrefix(prefix), limit.WithObserver(obs), limit.WithRefusalCache(c))
		require.NoError(t, err)
		return l
	}},
	{"windows", func(t *testing.T, cl rueidis.Client, prefix string, c *limit.RefusalCache, obs store.Observer) limit.Limiter {
		l, err := limit.NewWindows(cl, "win", []limit.WindowLimit{
			{Name: "short", Limit: 5, Window: store.Window{Length: 2 * time.Second, Bucket: 200 * time.Millisecond}},
			{Name: "long", Limit: 100, Window: store.Window{Length: time.Minute, Bucket: time.Second}},
		}, limit.WithPrefix(prefix), limit.WithObserver(obs), limit.WithRefusalCache(c))
		require.NoError(t, err)
		return l
	}},
	{"combine", func(t *testing.T, cl rueidis.Client, prefix string, c *limit.RefusalCache, obs store.Observer) limit.Limiter {
		var parts []limit.Limiter
		for _, p := range []struct {
			name string
			lim  int64
			w    store.Window
		}{{"short", 5, store.Window{Length: 2 * time.Second, Bucket: 200 * time.Millisecond}},
			{"long", 100, store.Window{Length: time.Minute, Bucket: time.Second}}} {
			st, err := store.New(ctxT(t), cl, p.w, store.WithPrefix(prefix), store.WithObserver(obs))
			require.NoError(t, err)
			l, err := limit.NewSlidingWindow(st, p.name, p.lim)
			require.NoError(t, err)
			parts = append(parts, l)
		}
		if c == nil {
			// A combination keeps a refusal cache of its own: the fresh
			// limiter asks the server through limit.AllowKeys instead.
			return serverOnly(parts)
		}
		m, err := limit.Combine(parts...)
		require.NoError(t, err)
		return m
	}},
}

// serverOnly decides sliding windows of one key together, as a combination
// does, asking the server every time (limit.AllowKeys keeps no refusal).
type serverOnly []limit.Limiter

func (s serverOnly) Policy() limit.Policy { return s[0].Policy() }

func (s serverOnly) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	ks := make([]limit.Keyed, len(s))
	for i, l := range s {
		ks[i] = limit.Keyed{Limiter: l, Key: key}
	}
	return limit.AllowKeys(ctx, n, ks...)
}

func (s serverOnly) AllowAt(context.Context, time.Time, string, int64) (store.Decision, error) {
	return store.Decision{}, errors.New("serverOnly: AllowAt is not used")
}

// TestRefusalCache: on every server and for every limiter, 40 concurrent
// callers are admitted exactly 5 times; a refusal repeated within its
// RetryAfter then makes no script call, answers the refusal with its
// RetryAfter counted down (never above what the server answered, never
// below what a fresh server call answers), and a retry at that RetryAfter
// is admitted; another cost asks the server; a GCRA's Refund forgets the
// key. Combine keeps a cache of its own (its hits are not c's).
func TestRefusalCache(t *testing.T) {
	t.Parallel()
	for _, kind := range []harness.Kind{harness.Redis70, harness.Redis80, harness.Valkey, harness.Valkey9} {
		for _, ck := range cachedKinds {
			t.Run(string(kind)+"/"+ck.name, func(t *testing.T) {
				t.Parallel()
				srv := harness.Shared(t, kind)
				cl := srv.Client(t)
				prefix := harness.Prefix(t)
				cache := limit.NewRefusalCache(0)
				obs := &callCounter{}
				l := ck.make(t, cl, prefix, cache, obs)
				fresh := ck.make(t, cl, prefix, nil, &callCounter{}) // the same keys, no cache
				ctx := ctxT(t)

				var admitted, longest atomic.Int64 // longest: the longest call's span, in ns
				var wg sync.WaitGroup
				for range 40 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						start := time.Now()
						d, err := l.Allow(ctx, "k", 1)
						for took := int64(time.Since(start)); ; {
							if old := longest.Load(); took <= old || longest.CompareAndSwap(old, took) {
								break
							}
						}
						if err == nil && d.Allowed {
							admitted.Add(1)
						}
						require.NoError(t, err)
					}()
				}
				wg.Wait()
				require.Equal(t, int64(5), admitted.Load(), "exactly the limit admitted with the cache on")

				// A refusal, remembered by one of the calls above or asked now:
				// it was answered no later than the longest call's span after
				// the server decided it.
				asked := time.Now()
				d0, err := l.Allow(ctx, "k", 1)
				span := max(time.Since(asked), time.Duration(longest.Load()))
				require.NoError(t, err)
				require.False(t, d0.Allowed)
				calls, hits := obs.calls.Load(), cache.Hits()
				last := d0.RetryAfter
				for range 50 {
					before := time.Now()
					d, err := l.Allow(ctx, "k", 1)
					require.NoError(t, err)
					require.False(t, d.Allowed)
					require.Greater(t, d.RetryAfter, time.Duration(0))
					require.LessOrEqual(t, d.RetryAfter, last, "counted down")
					last = d.RetryAfter
					// A fresh call after the cached one sees no more time left,
					// and less by no more than the calls' spans.
					f, err := fresh.Allow(ctx, "k", 1)
					require.NoError(t, err)
					require.False(t, f.Allowed)
					// (Whole ms: the two server answers each rounded; and a few ms
					// of the server's own clock, which a loaded Valkey 9.1 was seen
					// to read 4 ms behind the host's between two calls.)
					require.LessOrEqual(t, f.RetryAfter, d.RetryAfter+5*time.Millisecond,
						"a retry at the cached RetryAfter is no earlier than the server's")
					require.GreaterOrEqual(t, f.RetryAfter, d.RetryAfter-time.Since(before)-span-3*time.Millisecond, // (whole ms: the server's two answers, the cache's rounding up)
						"the cached retry is the server's, counted down")
				}
				require.Equal(t, calls, obs.calls.Load(), "a repeated refusal makes no script call")
				if ck.name != "combine" {
					require.Equal(t, hits+50, cache.Hits())
				}

				// Another cost asks the server.
				d, err := l.Allow(ctx, "k", 2)
				require.NoError(t, err)
				require.False(t, d.Allowed)
				require.Equal(t, calls+1, obs.calls.Load(), "a cost other than the refused one asks the server")

				if ck.name == "gcra" {
					d, err := l.Allow(ctx, "k", 1)
					require.NoError(t, err)
					require.False(t, d.Allowed)
					_, err = limit.Refund(ctx, l, "k", 1)
					require.NoError(t, err)
					d, err = l.Allow(ctx, "k", 1)
					require.NoError(t, err)
					require.True(t, d.Allowed, "a Refund forgets the key's refusal")
					return
				}

				// A retry at the cached RetryAfter is admitted.
				d, err = l.Allow(ctx, "k", 1)
				require.NoError(t, err)
				require.False(t, d.Allowed)
				time.Sleep(d.RetryAfter)
				d, err = l.Allow(ctx, "k", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed, "a retry at the cached RetryAfter: %+v", d)
			})
		}
	}
}
