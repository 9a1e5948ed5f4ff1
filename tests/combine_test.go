package tests

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// combined makes a combination (limit.Combine) of per-10s, per-minute and per-hour sliding windows
// with limits 6, 4 and 50, on one server.
func combined(t *testing.T, tg target) (limit.Limiter, []*store.Store, []limit.Limiter) {
	ss := policyStores(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second},
		store.Window{Length: time.Minute, Bucket: 5 * time.Second}, store.Window{Length: time.Hour, Bucket: time.Minute})
	var ls []limit.Limiter
	for i, lim := range []int64{6, 4, 50} {
		l, err := limit.NewSlidingWindow(ss[i], []string{"per10s", "permin", "perhour"}[i], lim)
		require.NoError(t, err)
		ls = append(ls, l)
	}
	m, err := limit.Combine(ls...)
	require.NoError(t, err)
	return m, ss, ls
}

// TestCombineExact: 40 concurrent callers of a three-policy limiter admit
// exactly the tightest limit; refusals name the refusing policy, change no
// counter, and their retry-after is honest, on every backend.
func TestCombineExact(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		m, ss, _ := combined(t, tg)
		ctx := ctxT(t)
		require.EqualValues(t, 4, raceAllow(t, m, 40, func(d store.Decision) {
			assert.Equal(t, "permin", d.Policy)
			assert.Len(t, d.Policies, 3)
		}))
		for i, s := range ss {
			n, err := s.Sub([]string{"per10s", "permin", "perhour"}[i]).Sum(ctx, "u")
			require.NoError(t, err)
			require.EqualValues(t, 4, n, "policy %d", i)
		}
		// Retry-after, on a client clock: 4 events in the minute's first
		// bucket, so the minute admits again when that bucket leaves.
		t0 := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
		for i := 0; i < 4; i++ {
			d, err := m.AllowAt(ctx, t0.Add(time.Duration(i)*time.Second), "r", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		now := t0.Add(20 * time.Second)
		d, err := m.AllowAt(ctx, now, "r", 2)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, "permin", d.Policy)
		require.Equal(t, 40*time.Second, d.RetryAfter)
		d, err = m.AllowAt(ctx, now.Add(d.RetryAfter-time.Millisecond), "r", 2)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		d, err = m.AllowAt(ctx, now.Add(40*time.Second), "r", 2)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	})
}

// TestMiddlewareAtomicRule: a rule with several sliding windows counts a
// request in none of them when one refuses (the flaw of asking in order is
// gone).
func TestMiddlewareAtomicRule(t *testing.T) {
	_, ss, ls := combined(t, targets[0])
	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), Limiters: ls}})
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		codes[get(t, ts.URL, map[string]string{"X-User": "u"}).StatusCode]++
	}
	require.Equal(t, map[int]int{200: 4, http.StatusTooManyRequests: 6}, codes)
	ctx := ctxT(t)
	for i, name := range []string{"per10s", "permin", "perhour"} {
		n, err := ss[i].Sub(name).Sum(ctx, "api:h:u")
		require.NoError(t, err)
		require.EqualValues(t, 4, n, "%s counted refused requests", name)
	}
}

// raceAllow has n callers ask l for a cost of 1 of key "u" at once, and
// answers how many were admitted; refused checks each refusal.
func raceAllow(t *testing.T, l limit.Limiter, n int, refused func(d store.Decision)) int64 {
	ctx := ctxT(t)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.Allow(ctx, "u", 1)
			if !assert.NoError(t, err) {
				return
			}
			if d.Allowed {
				ok.Add(1)
				return
			}
			refused(d)
		}()
	}
	wg.Wait()
	return ok.Load()
}

// TestCombineOfCombinations: Combine takes combinations as well as sliding
// windows, their policies joining in order, and one decision covers them
// all; a policy named twice is refused with store.ErrInvalid.
func TestCombineOfCombinations(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		_, _, ls := combined(t, tg)
		inner, err := limit.Combine(ls[0], ls[1])
		require.NoError(t, err)
		m, err := limit.Combine(inner, ls[2])
		require.NoError(t, err)
		var names []string
		for _, p := range limit.Policies(m) {
			names = append(names, p.Name)
		}
		require.Equal(t, []string{"per10s", "permin", "perhour"}, names)
		ctx := ctxT(t)
		for i := 0; i < 4; i++ {
			d, err := m.Allow(ctx, "nested", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "call %d", i)
			require.Len(t, d.Policies, 3)
		}
		d, err := m.Allow(ctx, "nested", 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, "permin", d.Policy)
		_, err = limit.Combine(inner, ls[0])
		require.ErrorIs(t, err, store.ErrInvalid, "per10s twice")
	})
}

// TestCombineAcrossServers: a combination whose policies live on two servers
// (Redis 7.0 and Redis 8) is still all or nothing: of 40 concurrent callers
// at most the tighter limit is admitted, and then callers one by one to
// exactly that limit, each counted on both servers, and a
// refusal on one server leaves the other's counter as it was; no refusal is
// remembered in process (RefusalCache).
func TestCombineAcrossServers(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	w := store.Window{Length: time.Hour, Bucket: time.Minute}
	obs := &callCounter{}
	a, err := store.New(ctx, harness.Shared(t, harness.Redis70).Client(t), w, store.WithPrefix(harness.Prefix(t)), store.WithObserver(obs))
	require.NoError(t, err)
	b, err := store.New(ctx, harness.Shared(t, harness.Redis80).Client(t), w, store.WithPrefix(harness.Prefix(t)), store.WithObserver(obs))
	require.NoError(t, err)
	la, err := limit.NewSlidingWindow(a, "a", 7)
	require.NoError(t, err)
	lb, err := limit.NewSlidingWindow(b, "b", 30)
	require.NoError(t, err)
	m, err := limit.Combine(la, lb)
	require.NoError(t, err)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			d, err := m.Allow(ctx, "k", 1)
			if assert.NoError(t, err) && d.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	// Across clients a reservation another server refuses is taken back, so
	// under contention a caller can be refused by a reservation that did not
	// last (documented on store.ApplyAll): never more than the limit, and the
	// rest is admitted afterwards, to exactly the tighter limit.
	require.LessOrEqual(t, admitted.Load(), int64(7), "never more than the tighter limit")
	for {
		d, err := m.Allow(ctx, "k", 1)
		require.NoError(t, err)
		if !d.Allowed {
			break
		}
		admitted.Add(1)
	}
	require.EqualValues(t, 7, admitted.Load(), "the tighter limit, exactly")
	for _, s := range []*store.Store{a.Sub("a"), b.Sub("b")} {
		n, err := s.Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 7, n, "every admission counted on both servers, no refusal anywhere")
	}
	// Across clients a refusal can come from a reservation that is taken
	// back: none is remembered, so a repeated one asks the servers.
	calls := obs.calls.Load()
	d, err := m.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Greater(t, obs.calls.Load(), calls, "a combination across clients remembers no refusal")
}

// TestAllowKeys: limit.AllowKeys decides limiters of several keys all or
// nothing on every backend: a combination on one key and a sliding window on
// another; a refusal by either counts on neither, and the decision names
// the refusing policy; of 40 concurrent callers exactly the tighter limit is
// admitted. Other limiters, or none, are ErrInvalid.
func TestAllowKeys(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		prefix := harness.Prefix(t)
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(prefix))
		sHour, _ := newStore(t, tg, store.Window{Length: time.Hour, Bucket: time.Minute}, store.WithPrefix(prefix))
		perMin, err := limit.NewSlidingWindow(s, "permin", 100)
		require.NoError(t, err)
		perHour, err := limit.NewSlidingWindow(sHour, "perhour", 1000)
		require.NoError(t, err)
		user, err := limit.Combine(perMin, perHour)
		require.NoError(t, err)
		ip, err := limit.NewSlidingWindow(s, "perip", 7)
		require.NoError(t, err)
		sum := func(st *store.Store, sub, key string) int64 {
			n, err := st.Sub(sub).Sum(ctx, key)
			require.NoError(t, err)
			return n
		}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				d, err := limit.AllowKeys(ctx, 1, limit.Keyed{Limiter: user, Key: "u"}, limit.Keyed{Limiter: ip, Key: "i"})
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else {
					assert.Equal(t, "perip", d.Policy)
				}
				assert.Equal(t, []string{"permin", "perhour", "perip"}, []string{d.Policies[0].Policy, d.Policies[1].Policy, d.Policies[2].Policy})
			})
		}
		wg.Wait()
		require.EqualValues(t, 7, admitted.Load())
		require.EqualValues(t, 7, sum(s, "permin", "u"), "the refused counted nothing on the user")
		require.EqualValues(t, 7, sum(sHour, "perhour", "u"))
		require.EqualValues(t, 7, sum(s, "perip", "i"))

		logged, err := limit.NewLog(srv.Client(t), "log", 3, time.Minute)
		require.NoError(t, err)
		_, err = limit.AllowKeys(ctx, 1, limit.Keyed{Limiter: logged, Key: "u"})
		require.ErrorIs(t, err, store.ErrInvalid)
		_, err = limit.AllowKeys(ctx, 1)
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}
