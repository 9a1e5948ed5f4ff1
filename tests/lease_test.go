package tests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// leaseRace runs the concurrency limit's race on c: 40 callers acquire at
// once and exactly max are admitted; each admitted lease releases once (a
// second Release changes nothing); then 40 callers loop acquire, hold,
// release, and the leases held at once never exceed max.
func leaseRace(t *testing.T, ctx context.Context, c *limit.Concurrency, key string, max int) {
	const callers = 40
	var wg sync.WaitGroup
	ids := make(chan string, callers)
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			l, err := c.Acquire(ctx, key)
			require.NoError(t, err)
			if l.Allowed {
				ids <- l.ID
			} else {
				require.Greater(t, l.RetryAfter, time.Duration(0), "a refusal says when the first lease ends")
				require.EqualValues(t, max, l.Sum)
			}
		})
	}
	close(start)
	wg.Wait()
	close(ids)
	var held []string
	for id := range ids {
		held = append(held, id)
	}
	require.Len(t, held, max, "exactly max of %d racing callers hold a lease", callers)
	for _, id := range held {
		ok, err := c.Release(ctx, key, id)
		require.NoError(t, err)
		require.True(t, ok, "the first release ends the lease")
		ok, err = c.Release(ctx, key, id)
		require.NoError(t, err)
		require.False(t, ok, "a second release changes nothing")
	}
	// In flight, as the callers see it, never above max.
	var inflight, peak, admitted atomic.Int64
	for range callers {
		wg.Go(func() {
			for range 8 {
				l, err := c.Acquire(ctx, key)
				require.NoError(t, err)
				if !l.Allowed {
					continue
				}
				admitted.Add(1)
				n := inflight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				inflight.Add(-1)
				ok, err := c.Release(ctx, key, l.ID)
				require.NoError(t, err)
				require.True(t, ok)
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int64(max), "more leases in flight than max")
	require.Greater(t, admitted.Load(), int64(max), "the leases were reused")
}

// TestLeaseRace: a concurrency limit of 5 holds exactly 5 leases under 40
// racing callers, on every backend.
func TestLeaseRace(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		c, err := limit.NewConcurrency(s, "inflight", 5, time.Minute)
		require.NoError(t, err)
		leaseRace(t, ctxT(t), c, "user:42", 5)
	})
}

// TestLeaseTTL: on a client clock, a lease ends at its TTL exactly (a holder
// that crashed frees it), RetryAfter is the time until the first lease ends,
// Refresh extends a held lease and does not take an ended one back, and a
// limit of 0 refuses for ever.
func TestLeaseTTL(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		var now atomic.Int64
		t0 := time.Now().Truncate(time.Second)
		now.Store(t0.UnixNano())
		at := func(d time.Duration) { now.Store(t0.Add(d).UnixNano()) }
		prefix := harness.Prefix(t)
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(prefix),
			store.WithClientClock(func() time.Time { return time.Unix(0, now.Load()) }))
		ctx := ctxT(t)
		c, err := limit.NewConcurrency(s, "api", 2, 10*time.Second)
		require.NoError(t, err)
		require.Equal(t, limit.Policy{Name: "api", Limit: 2, Window: 10 * time.Second, Algorithm: "concurrency"}, c.Policy())

		a, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, a.Allowed)
		require.EqualValues(t, 1, a.Sum)
		require.EqualValues(t, 1, a.Remaining)
		at(4 * time.Second)
		bStart := time.Now()
		b, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, b.Allowed)
		require.Equal(t, store.Decision{Allowed: true, Limit: 2, Sum: 2, Remaining: 0, Policy: "api"}, b.Decision)
		require.NotEqual(t, a.ID, b.ID)
		// The key's sorted set expires with its last lease, on the server's
		// clock: 14 s from t0 on the client's, 10 s from now at most.
		pttl, err := strconv.Atoi(srv.Cmd(t, "PTTL", prefix+"{k}:api:lease"))
		require.NoError(t, err)
		// 10 s from the second Acquire, which ran after bStart.
		requireBetween(t, time.Duration(pttl)*time.Millisecond, 10*time.Second-time.Since(bStart)-time.Millisecond, 10*time.Second,
			"the leases' key expires with the last lease, 10 s from its Acquire")

		at(10*time.Second - time.Millisecond)
		r, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.False(t, r.Allowed)
		require.Equal(t, time.Millisecond, r.RetryAfter, "the first lease ends in 1 ms")
		require.EqualValues(t, 2, r.Sum)
		at(10 * time.Second)
		r, err = c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, r.Allowed, "the first lease ended at its TTL: its holder never released it")
		require.EqualValues(t, 2, r.Sum)
		ok, err := c.Release(ctx, "k", a.ID)
		require.NoError(t, err)
		require.False(t, ok, "a lease ended by its TTL is not released again")

		// b ends at 14 s; refreshed at 13 s it ends at 23 s.
		at(13 * time.Second)
		ok, err = c.Refresh(ctx, "k", b.ID)
		require.NoError(t, err)
		require.True(t, ok)
		at(22 * time.Second)
		r2, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, r2.Allowed, "r's lease ended at 20 s")
		r3, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.False(t, r3.Allowed, "b, refreshed, is held until 23 s")
		require.Equal(t, time.Second, r3.RetryAfter)
		at(23 * time.Second)
		ok, err = c.Refresh(ctx, "k", b.ID)
		require.NoError(t, err)
		require.False(t, ok, "an ended lease is not taken back by Refresh")
		ok, err = c.Release(ctx, "k", r2.ID)
		require.NoError(t, err)
		require.True(t, ok)

		zero, err := limit.NewConcurrency(s, "none", 0, time.Second)
		require.NoError(t, err)
		z, err := zero.Acquire(ctx, "k")
		require.NoError(t, err)
		require.False(t, z.Allowed)
		require.Equal(t, time.Duration(-1), z.RetryAfter, "a limit of 0 never admits")
	})
}

// TestLeaseExpiresOnServer: on the server's clock, a lease that is never
// released frees its place once its TTL has passed, and the key is gone.
func TestLeaseExpiresOnServer(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		prefix := harness.Prefix(t)
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(prefix))
		ctx := ctxT(t)
		c, err := limit.NewConcurrency(s, "crash", 1, 300*time.Millisecond)
		require.NoError(t, err)
		a, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, a.Allowed)
		began := time.Now()
		r, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		if time.Since(began) < 250*time.Millisecond {
			require.False(t, r.Allowed, "the lease is held")
		}
		time.Sleep(350 * time.Millisecond)
		require.Equal(t, "0", srv.Cmd(t, "EXISTS", prefix+"{k}:crash:lease"), "the key expires with its last lease")
		r, err = c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, r.Allowed, "the crashed holder's lease ended by its TTL")
	})
}

// TestLeaseWithLimits: a lease decided with a rate limit of its key in one
// batch, all or nothing: a refusal by the rate limit takes no lease, and a
// refusal for want of a lease counts nothing; an event id makes the batch
// count once.
func TestLeaseWithLimits(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		c, err := limit.NewConcurrency(s, "inflight", 2, time.Minute)
		require.NoError(t, err)
		batch := func(id string, rate int64) store.BatchResult {
			res, err := store.Apply(ctx, store.Batch{ID: id, Ops: []store.Op{
				{Store: s, Key: "u", Kind: store.OpLimit, Limit: rate, Delta: 1},
				c.Op("u", ""),
			}})
			require.NoError(t, err)
			return res[0]
		}
		r := batch("", 1)
		require.True(t, r.Allowed)
		require.True(t, r.Values[1].Counted)
		require.EqualValues(t, 1, r.Values[1].Sum)
		require.NotEmpty(t, r.Values[1].Lease)
		// The rate limit refuses: no lease is taken.
		r = batch("", 1)
		require.False(t, r.Allowed)
		require.Equal(t, 0, r.RefusedBy)
		require.False(t, r.Values[1].Counted)
		require.False(t, r.Values[1].Refused, "a lease was free")
		require.EqualValues(t, 1, r.Values[1].Sum, "no lease taken")
		r = batch("", 10)
		require.True(t, r.Allowed)
		require.EqualValues(t, 2, r.Values[1].Sum)
		require.EqualValues(t, 2, r.Values[0].Sum)
		// No lease is free: the rate limit counts nothing.
		r = batch("", 10)
		require.False(t, r.Allowed)
		require.Equal(t, 1, r.RefusedBy)
		require.True(t, r.Values[1].Refused)
		require.Greater(t, r.RetryAfter, 50*time.Second, "the first lease ends in a minute")
		require.EqualValues(t, 2, r.Values[0].Sum, "the refused batch counted nothing")
		n, err := s.Sum(ctx, "u")
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		// An event id: the second call is a duplicate, with the first call's
		// decision, and takes no second lease.
		d, err := limit.NewConcurrency(s, "ids", 5, time.Minute)
		require.NoError(t, err)
		for i := range 2 {
			res, err := store.Apply(ctx, store.Batch{ID: "e1", Ops: []store.Op{d.Op("v", "lease-e1"),
				{Store: s, Key: "v", Kind: store.OpLimit, Limit: 10, Delta: 1}}})
			require.NoError(t, err)
			require.Equal(t, i == 1, res[0].Duplicate)
			require.True(t, res[0].Allowed)
			require.EqualValues(t, 1, res[0].Values[0].Sum, "one lease")
			require.Equal(t, i == 0, res[0].Values[0].Counted)
			require.EqualValues(t, 1, res[0].Values[1].Sum, "counted once")
		}
		// Bad lease ops are refused before anything is sent.
		for _, op := range []store.Op{
			{Store: s, Key: "v", Kind: store.OpRelease},
			{Store: s, Key: "v", Kind: store.OpRefresh, Lease: "x"},
			{Store: s, Key: "v", Kind: store.OpAcquire, Lease: "a b", TTL: time.Second, Limit: 1},
			{Store: s, Key: "v", Kind: store.OpAcquire, TTL: time.Second, Limit: -1},
		} {
			_, err := store.Apply(ctx, store.Batch{Ops: []store.Op{op}})
			require.ErrorIs(t, err, store.ErrInvalid, "%+v", op)
		}
		_, err = store.Apply(ctx, store.Batch{Ops: []store.Op{c.Op("v", ""), c.Op("v", "")}})
		require.ErrorIs(t, err, store.ErrInvalid, "the leases of one key twice in a batch")
		_, err = limit.NewConcurrency(s, "bad", 1, 1500*time.Microsecond)
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

// TestLeaseCluster: on a Redis Cluster, 40 callers race for 3 leases of a
// key, and a lease is decided with its key's rate limit in the key's slot.
func TestLeaseCluster(t *testing.T) {
	t.Parallel()
	cl := harness.NewCluster(t)
	ctx := ctxT(t)
	s, err := store.New(ctx, cl.Client(t), store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(harness.Prefix(t)))
	require.NoError(t, err)
	c, err := limit.NewConcurrency(s, "inflight", 3, time.Minute)
	require.NoError(t, err)
	for _, key := range []string{"a", "b", "c"} {
		leaseRace(t, ctx, c, key, 3)
	}
	res, err := store.Apply(ctx, store.Batch{Ops: []store.Op{c.Op("a", ""), {Store: s.Sub("inflight"), Key: "a", Kind: store.OpLimit, Limit: 5, Delta: 1}}})
	require.NoError(t, err)
	require.True(t, res[0].Allowed)

	// httplimit's Rule.InFlight with a sliding window decides both in one
	// script call on the cluster too: of 3 requests with a limit of 2, 2
	// are served and counted, and the refused one holds no lease.
	perMin, err := limit.NewSlidingWindow(s, "permin", 2)
	require.NoError(t, err)
	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{perMin}, InFlight: c}})
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	var codes []int
	for range 3 {
		codes = append(codes, get(t, ts.URL, map[string]string{"X-User": "cl"}).StatusCode)
	}
	require.Equal(t, []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests}, codes)
	n, err := s.Sub("permin").Sum(ctx, "api:h:cl")
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	held, err := store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: s.Sub("inflight"), Key: "api:h:cl", Kind: store.OpAcquire, Limit: 0, TTL: time.Minute}}})
	require.NoError(t, err)
	require.EqualValues(t, 0, held[0].Values[0].Sum, "no lease held: the served released theirs, the refused took none")
}

// TestWindowctlLease drives `windowctl lease` against a real server: at most
// --max leases, a refusal exits 3 with retry_after_ms, release answers true
// once, refresh only a held lease, and bad input exits 2.
func TestWindowctlLease(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	prefix := "--prefix=" + harness.Prefix(t)
	acquire := func() (map[string]any, int) {
		out, errs, code := ctl(t, srv, prefix, "--json", "lease", "acquire", "--max", "2", "--ttl", "5m", "job:7")
		require.Contains(t, []int{0, 3}, code, errs)
		return jsonLine(t, out), code
	}
	start := time.Now()
	a, code := acquire()
	require.Zero(t, code)
	require.Equal(t, true, a["acquired"])
	require.EqualValues(t, 1, a["held"])
	id, _ := a["lease"].(string)
	require.NotEmpty(t, id)
	b, code := acquire()
	require.Zero(t, code)
	require.EqualValues(t, 2, b["held"])
	r, code := acquire()
	require.Equal(t, 3, code, "a refusal exits 3")
	require.Equal(t, map[string]any{"key": "job:7", "acquired": false, "lease": "", "held": 2.0}, map[string]any{
		"key": r["key"], "acquired": r["acquired"], "lease": r["lease"], "held": r["held"]})
	// The retry is when the first lease expires: 5m after it was taken,
	// less the time the three calls took (each is a process of its own,
	// seconds apiece on a loaded machine, so the TTL is long enough that
	// no lease of the test expires before its end).
	elapsed := time.Since(start).Milliseconds()
	retry, _ := r["retry_after_ms"].(float64)
	require.LessOrEqual(t, retry, 300000.0+1000, "the retry is at most the lease's TTL")
	require.GreaterOrEqual(t, retry, float64(300000-elapsed-1000), "the retry is when the first lease expires (calls took %d ms)", elapsed)

	out, errs, code := ctl(t, srv, prefix, "--json", "lease", "refresh", "--ttl", "1m", "job:7", id)
	require.Zero(t, code, errs)
	require.Equal(t, map[string]any{"key": "job:7", "refreshed": true}, jsonLine(t, out))
	for _, want := range []bool{true, false} {
		out, errs, code = ctl(t, srv, prefix, "--json", "lease", "release", "job:7", id)
		require.Zero(t, code, errs)
		require.Equal(t, map[string]any{"key": "job:7", "released": want}, jsonLine(t, out))
	}
	out, errs, code = ctl(t, srv, prefix, "--json", "lease", "refresh", "--ttl", "1m", "job:7", id)
	require.Zero(t, code, errs)
	require.Equal(t, map[string]any{"key": "job:7", "refreshed": false}, jsonLine(t, out), "a released lease is not refreshed")
	out, errs, code = ctl(t, srv, prefix, "lease", "acquire", "--max", "2", "--ttl", "30s", "job:7")
	require.Zero(t, code, errs)
	require.Regexp(t, `^job:7\tacquired \S+\theld 2\n$`, out)

	for _, args := range [][]string{
		{"lease", "acquire", "--ttl", "30s", "k"},
		{"lease", "acquire", "--max", "-1", "--ttl", "30s", "k"},
		{"lease", "acquire", "--max", "1", "--ttl", "1.5ms", "k"},
		{"lease", "acquire", "--max", "1", "k"},
		{"lease", "release", "k"},
		{"lease", "refresh", "k", "id"},
		{"lease", "steal", "k"},
	} {
		_, errs, code := ctl(t, srv, append([]string{prefix}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errs)
	}
	// An id that begins with '-' (an earlier build's) goes after "--".
	out, errs, code = ctl(t, srv, prefix, "--json", "lease", "release", "job:7", "--", "-old")
	require.Zero(t, code, errs)
	require.Equal(t, map[string]any{"key": "job:7", "released": false}, jsonLine(t, out))
}
