package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/metrics/prom"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

var (
	// draft-ietf-httpapi-ratelimit-headers: a List of token items with q and w,
	// and one item with r and t.
	policyRE = regexp.MustCompile(`^[A-Za-z*][A-Za-z0-9:/!#$%&'*+\-.^_` + "`" + `|~]*;q=\d+;w=\d+(, [A-Za-z*][A-Za-z0-9:/!#$%&'*+\-.^_` + "`" + `|~]*;q=\d+;w=\d+)*$`)
	limitRE  = regexp.MustCompile(`^([A-Za-z*][A-Za-z0-9:/!#$%&'*+\-.^_` + "`" + `|~]*);r=(\d+);t=(\d+)$`)
)

type countingRecorder struct {
	mu  sync.Mutex
	got map[httplimit.Outcome]int
}

func (c *countingRecorder) Observe(rule string, o httplimit.Outcome, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[httplimit.Outcome]int{}
	}
	c.got[o]++
}

func (c *countingRecorder) count(o httplimit.Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got[o]
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
}

func get(t *testing.T, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestMiddlewareHeaders checks status codes and header fields against the draft,
// with two limits at once, on a real server through a real HTTP client.
func TestMiddlewareHeaders(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	prefix := harness.Prefix(t)
	perSec, err := limit.NewLog(c, "persec", 3, 10*time.Second, limit.WithPrefix(prefix))
	require.NoError(t, err)
	perHour, err := limit.NewFixedWindow(c, "perhour", 100, time.Hour, limit.WithPrefix(prefix))
	require.NoError(t, err)
	mw, err := httplimit.New([]httplimit.Rule{{
		Name: "api", Key: httplimit.Header("X-API-Key"), Limiters: []limit.Limiter{perSec, perHour},
	}}, httplimit.WithLegacyHeaders(), httplimit.WithOnError(func(_ *http.Request, rule string, err error) { t.Logf("rule %s: %v", rule, err) }))
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()

	hdr := map[string]string{"X-API-Key": "k1"}
	for i := 0; i < 3; i++ {
		resp := get(t, ts.URL, hdr)
		require.Equal(t, 200, resp.StatusCode)
		require.Regexp(t, policyRE, resp.Header.Get("RateLimit-Policy"))
		require.Equal(t, "persec;q=3;w=10, perhour;q=100;w=3600", resp.Header.Get("RateLimit-Policy"))
		// RateLimit lists every policy, in the rule's order.
		items := strings.Split(resp.Header.Get("RateLimit"), ", ")
		require.Len(t, items, 2, resp.Header.Get("RateLimit"))
		m := limitRE.FindStringSubmatch(items[0])
		require.NotNil(t, m, items[0])
		require.Equal(t, "persec", m[1])
		require.Equal(t, strconv.Itoa(2-i), m[2])
		require.Equal(t, "10", m[3])
		m = limitRE.FindStringSubmatch(items[1])
		require.NotNil(t, m, items[1])
		require.Equal(t, "perhour", m[1])
		require.Equal(t, strconv.Itoa(99-i), m[2])
		// The legacy fields describe the policy with the least remaining.
		require.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))
		require.Equal(t, strconv.Itoa(2-i), resp.Header.Get("X-RateLimit-Remaining"))
		require.Empty(t, resp.Header.Get("Retry-After"))
	}
	resp := get(t, ts.URL, hdr)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	m := limitRE.FindStringSubmatch(resp.Header.Get("RateLimit"))
	require.NotNil(t, m)
	require.Equal(t, "persec", m[1])
	require.Equal(t, "0", m[2])
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.Greater(t, ra, 0)
	require.LessOrEqual(t, ra, 10)
	require.Equal(t, strconv.Itoa(ra), m[3], "t and Retry-After name the same moment")
	// Another key is not affected; a request without the key is the client's
	// fault: 400, with the reason.
	require.Equal(t, 200, get(t, ts.URL, map[string]string{"X-API-Key": "k2"}).StatusCode)
	resp = get(t, ts.URL, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestMiddlewareFailurePolicy stops the server and checks fail-open and
// fail-closed rules, and that the error reaches the hook.
func TestMiddlewareFailurePolicy(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	c := srv.Client(t)
	l, err := limit.NewLog(c, "persec", 100, time.Second, limit.WithPrefix("fp:"))
	require.NoError(t, err)
	var errs atomic.Int64
	mk := func(open bool) *httptest.Server {
		mw, err := httplimit.New([]httplimit.Rule{{Name: "r", Key: httplimit.ClientIP(), Limiters: []limit.Limiter{l}, FailOpen: open}},
			httplimit.WithOnError(func(*http.Request, string, error) { errs.Add(1) }))
		require.NoError(t, err)
		return httptest.NewServer(mw(okHandler()))
	}
	open, closed := mk(true), mk(false)
	defer open.Close()
	defer closed.Close()
	require.Equal(t, 200, get(t, open.URL, nil).StatusCode)
	require.Equal(t, 200, get(t, closed.URL, nil).StatusCode)
	require.Zero(t, errs.Load())

	srv.Stop()
	start := time.Now()
	require.Equal(t, 200, get(t, open.URL, nil).StatusCode, "fail open")
	require.Equal(t, http.StatusServiceUnavailable, get(t, closed.URL, nil).StatusCode, "fail closed")
	require.EqualValues(t, 2, errs.Load())
	t.Logf("two requests against a stopped server answered in %v", time.Since(start))
}

// TestMiddlewareLocalTier: many concurrent requests from one client through
// the local tier are admitted exactly up to the limit; the rest are shed,
// later ones without a server call.
func TestMiddlewareLocalTier(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	l, err := limit.NewLog(c, "permin", 10, time.Minute, limit.WithPrefix(harness.Prefix(t)))
	require.NoError(t, err)
	rec := &countingRecorder{}
	cost := func(r *http.Request) int64 {
		if r.Header.Get("X-Cost") == "2" {
			return 2
		}
		return 1
	}
	mw, err := httplimit.New([]httplimit.Rule{{Name: "r", Key: httplimit.Header("X-User"), Cost: cost, Limiters: []limit.Limiter{l}}},
		httplimit.WithLocalTier(0), httplimit.WithRecorder(rec))
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if get(t, ts.URL, map[string]string{"X-User": "mallory"}).StatusCode == 200 {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 10, ok.Load(), "the local tier must never admit more than the limit")
	require.Equal(t, 10, rec.count(httplimit.Allowed))
	require.Equal(t, 200, rec.count(httplimit.Allowed)+rec.count(httplimit.Refused)+rec.count(httplimit.LocalShed))
	// Once a refusal is known locally, later requests are shed without a
	// server call: +50 local sheds, +0 server refusals, +0 admissions.
	shed, refused := rec.count(httplimit.LocalShed), rec.count(httplimit.Refused)
	for i := 0; i < 50; i++ {
		require.Equal(t, http.StatusTooManyRequests, get(t, ts.URL, map[string]string{"X-User": "mallory"}).StatusCode)
	}
	require.Equal(t, shed+50, rec.count(httplimit.LocalShed), "later refusals must be shed locally")
	require.Equal(t, refused, rec.count(httplimit.Refused), "later refusals must not reach the server")
	require.Equal(t, 10, rec.count(httplimit.Allowed))
	require.Equal(t, 200, get(t, ts.URL, map[string]string{"X-User": "alice"}).StatusCode, "another key must not be shed")

	// Only the refused cost is shed: a larger one asks the limiter.
	require.Equal(t, http.StatusTooManyRequests, get(t, ts.URL, map[string]string{"X-User": "mallory", "X-Cost": "2"}).StatusCode)
	require.Equal(t, shed+50, rec.count(httplimit.LocalShed), "a larger cost must not be shed")
	require.Equal(t, refused+1, rec.count(httplimit.Refused))
}

// TestMiddlewareShadow: a shadow rule on a real server never answers 429,
// while its limiter counts as if enforced, and its Prometheus metrics show
// the refusals it would have made; the enforced rule after it still applies.
func TestMiddlewareShadow(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	prefix := harness.Prefix(t)
	tight, err := limit.NewGCRA(c, "tight", 1, time.Hour, 3, limit.WithPrefix(prefix))
	require.NoError(t, err)
	loose, err := limit.NewLog(c, "loose", 100, time.Minute, limit.WithPrefix(prefix))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	rec, err := prom.New(reg, "t")
	require.NoError(t, err)
	var hooked atomic.Int64
	mw, err := httplimit.New([]httplimit.Rule{
		{Name: "preview", Key: httplimit.Header("X-API-Key"), Limiters: []limit.Limiter{tight}, Shadow: true},
		{Name: "api", Key: httplimit.Header("X-API-Key"), Limiters: []limit.Limiter{loose}},
	}, httplimit.WithRecorder(rec), httplimit.WithOnShadowRefusal(func(_ *http.Request, rule string, d store.Decision) {
		if rule != "preview" || !d.Allowed || !d.WouldRefuse || d.RetryAfter <= 0 {
			t.Errorf("hook: rule %s, %+v", rule, d)
		}
		hooked.Add(1)
	}))
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	for i := 0; i < 10; i++ {
		resp := get(t, ts.URL, map[string]string{"X-API-Key": "k"})
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
		require.Regexp(t, `^loose;r=\d+;t=\d+$`, resp.Header.Get("RateLimit"), "the enforced rule's fields")
	}
	require.EqualValues(t, 7, hooked.Load())
	want := `
# HELP t_ratelimit_decisions_total Rate-limiting decisions, by rule and outcome.
# TYPE t_ratelimit_decisions_total counter
t_ratelimit_decisions_total{outcome="allowed",rule="api"} 10
t_ratelimit_decisions_total{outcome="allowed",rule="preview"} 3
t_ratelimit_decisions_total{outcome="shadow_refused",rule="preview"} 7
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "t_ratelimit_decisions_total"))
	// The shadow limiter counted the 3 it admitted and none of the others:
	// enforced now, it refuses.
	d, err := tight.Allow(ctxT(t), "preview:h:k", 0)
	require.NoError(t, err)
	require.Zero(t, d.Remaining)
}

// TestHTTPInFlight: Rule.InFlight caps the requests of a key in flight. Of
// 40 concurrent requests with one key and a cap of 3, exactly 3 reach the
// handler and 37 are answered the configured 503 with Retry-After, counting
// nothing on the rule's rate limit; when the handlers return, their leases
// are released, and a request that a rate limit refuses gives its lease back
// at once.
func TestHTTPInFlight(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	ctx := ctxT(t)
	prefix := harness.Prefix(t)
	s, err := store.New(ctx, srv.Client(t), store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(prefix))
	require.NoError(t, err)
	in, err := limit.NewConcurrency(s, "inflight", 3, time.Minute)
	require.NoError(t, err)
	perMin, err := limit.NewSlidingWindow(s, "permin", 100)
	require.NoError(t, err)
	rec := &countingRecorder{}
	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{perMin},
		InFlight: in, InFlightStatus: http.StatusServiceUnavailable}}, httplimit.WithRecorder(rec))
	require.NoError(t, err)
	var inside atomic.Int64
	entered, unblock := make(chan struct{}, 40), make(chan struct{})
	ts := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		entered <- struct{}{}
		<-unblock
		_, _ = io.WriteString(w, "ok")
	})))
	defer ts.Close()

	const callers = 40
	codes := make(chan *http.Response, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() { codes <- get(t, ts.URL, map[string]string{"X-User": "u1"}) })
	}
	// The refused answer at once; the admitted wait in the handler.
	for range 3 {
		<-entered
	}
	var refused []*http.Response
	for len(refused) < callers-3 {
		refused = append(refused, <-codes)
	}
	require.EqualValues(t, 3, inside.Load(), "exactly 3 requests in flight")
	require.Equal(t, "3", srv.Cmd(t, "ZCARD", prefix+"{api:h:u1}:inflight:lease"), "3 leases held")
	for _, r := range refused {
		require.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
		require.NotEmpty(t, r.Header.Get("Retry-After"))
		require.Equal(t, "permin;q=100;w=60, inflight;q=3", r.Header.Get("RateLimit-Policy"))
		require.Regexp(t, `^inflight;r=0;t=\d+$`, r.Header.Get("RateLimit"))
	}
	close(unblock)
	wg.Wait()
	close(codes)
	for r := range codes {
		require.Equal(t, http.StatusOK, r.StatusCode)
	}
	require.Equal(t, callers-3, rec.count(httplimit.InFlightRefused))
	require.Equal(t, 3, rec.count(httplimit.Allowed))
	n, err := s.Sub("permin").Sum(ctx, "api:h:u1")
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "the refused requests counted nothing on the rate limit")
	require.Equal(t, "0", srv.Cmd(t, "ZCARD", prefix+"{api:h:u1}:inflight:lease"), "every lease released")

	// A rate limit that refuses: the lease goes back at once.
	tight, err := limit.NewSlidingWindow(s, "tight", 0)
	require.NoError(t, err)
	mw2, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{tight}, InFlight: in}})
	require.NoError(t, err)
	ts2 := httptest.NewServer(mw2(okHandler()))
	defer ts2.Close()
	r := get(t, ts2.URL, map[string]string{"X-User": "u2"})
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode)
	require.Equal(t, "0", srv.Cmd(t, "ZCARD", prefix+"{api:h:u2}:inflight:lease"), "a refused request holds no lease")

	_, err = httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), InFlight: in, InFlightStatus: 500}})
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), InFlight: in, Shadow: true}})
	require.ErrorIs(t, err, store.ErrInvalid)
}

// TestHTTPInFlightOneCall: a rule whose Limiters are sliding windows decides
// its InFlight lease and its limits in one script call, all or nothing: a
// request costs the server two script calls (that one, and the release when
// the handler returns), where limiters of another kind or client cost
// three. Of 40
// concurrent requests with 3 leases free and a limit of 2 per minute, exactly
// 2 are served, the limit counts exactly 2, and no lease is left held.
func TestHTTPInFlightOneCall(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	ctx := ctxT(t)
	c := srv.Client(t)
	s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithBatching(0, 0))
	require.NoError(t, err)
	hour, err := store.New(ctx, c, store.Window{Length: time.Hour, Bucket: time.Minute}, store.WithBatching(0, 0))
	require.NoError(t, err)
	in, err := limit.NewConcurrency(s, "inflight", 3, time.Minute)
	require.NoError(t, err)
	perMin, err := limit.NewSlidingWindow(s, "permin", 2)
	require.NoError(t, err)
	perHour, err := limit.NewSlidingWindow(hour, "perhour", 1000)
	require.NoError(t, err)
	big, err := limit.NewSlidingWindow(s, "big", 1000)
	require.NoError(t, err)
	gcra, err := limit.NewGCRA(c, "gcra", 1000, time.Minute, 10)
	require.NoError(t, err)
	user := 0
	calls := func(limiters ...limit.Limiter) int64 {
		t.Helper()
		mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), Limiters: limiters, InFlight: in}})
		require.NoError(t, err)
		ts := httptest.NewServer(mw(okHandler()))
		defer ts.Close()
		user++
		// One request first: the first script calls of a store load its
		// library.
		require.Equal(t, http.StatusOK, get(t, ts.URL, map[string]string{"X-User": "warm-" + strconv.Itoa(user)}).StatusCode)
		before := scriptCalls(t, srv)
		for range 5 {
			r := get(t, ts.URL, map[string]string{"X-User": "calls-" + strconv.Itoa(user)})
			require.Equal(t, http.StatusOK, r.StatusCode)
		}
		return scriptCalls(t, srv) - before
	}
	require.EqualValues(t, 10, calls(perHour), "one sliding window: lease and limit in one call, then the release")
	require.EqualValues(t, 10, calls(perHour, big), "two sliding windows (combined): one call, then the release")
	require.EqualValues(t, 15, calls(gcra), "a GCRA: the lease, the limit, the release")
	other, err := store.New(ctx, srv.Client(t), store.Window{Length: time.Minute, Bucket: time.Second})
	require.NoError(t, err)
	elsewhere, err := limit.NewSlidingWindow(other, "elsewhere", 1000)
	require.NoError(t, err)
	require.EqualValues(t, 15, calls(elsewhere), "a sliding window on another client: three calls")

	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{perMin, perHour}, InFlight: in}})
	require.NoError(t, err)
	var inside atomic.Int64
	unblock := make(chan struct{})
	ts := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		<-unblock
		_, _ = io.WriteString(w, "ok")
	})))
	defer ts.Close()
	const callers = 40
	codes := make(chan int, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() { codes <- get(t, ts.URL, map[string]string{"X-User": "race"}).StatusCode })
	}
	// The refused answer at once; the served wait in the handler.
	var refused []int
	timeout := time.After(30 * time.Second)
	for len(refused) < callers-2 {
		select {
		case c := <-codes:
			refused = append(refused, c)
		case <-timeout:
			close(unblock) // let the handlers return, so the test ends
			require.FailNow(t, "not every refusal came", "%d refused, %d served", len(refused), inside.Load())
		}
	}
	require.EqualValues(t, 2, inside.Load(), "exactly 2 requests served")
	for _, c := range refused {
		require.Equal(t, http.StatusTooManyRequests, c)
	}
	require.Equal(t, "2", srv.Cmd(t, "ZCARD", "ws:{api:h:race}:inflight:lease"), "the 2 served hold leases; the refused hold none")
	close(unblock)
	wg.Wait()
	close(codes)
	for c := range codes {
		require.Equal(t, http.StatusOK, c)
	}
	n, err := s.Sub("permin").Sum(ctx, "api:h:race")
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the limit counted exactly the served requests")
	n, err = hour.Sub("perhour").Sum(ctx, "api:h:race")
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, "0", srv.Cmd(t, "ZCARD", "ws:{api:h:race}:inflight:lease"), "every lease released")
}

// TestMiddlewareBadInputNeverFailsOpen: input the limiters refuse (a key too
// long to name a counter, a cost out of the limiter's range) is the client's
// fault: 431 for a header too long to be a key, else 400, on a fail-open rule
// too, and on the server nothing is written. A shadow rule records it as
// BadKey, never as a failure.
func TestMiddlewareBadInputNeverFailsOpen(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis80)
	c := srv.Client(t)
	ctx := ctxT(t)
	prefix := harness.Prefix(t)
	s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(prefix))
	require.NoError(t, err)
	perMin, err := limit.NewSlidingWindow(s, "permin", 3)
	require.NoError(t, err)
	logged, err := limit.NewLog(c, "log", 3, time.Minute, limit.WithPrefix(prefix))
	require.NoError(t, err)
	long := strings.Repeat("k", 2000)
	cost := func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64); return n }
	rec := &countingRecorder{}
	var hooked atomic.Int64
	for _, tc := range []struct {
		name string
		rule httplimit.Rule
		hdr  map[string]string
		code int
		body string
	}{
		{"header too long", httplimit.Rule{Key: httplimit.Header("X-Key"), Limiters: []limit.Limiter{perMin}},
			map[string]string{"X-Key": long}, http.StatusRequestHeaderFieldsTooLarge, "X-Key header is 2000 bytes"},
		{"key too long with the rule's name", httplimit.Rule{Key: httplimit.Header("X-Key"), Limiters: []limit.Limiter{perMin}},
			map[string]string{"X-Key": long[:1021]}, http.StatusBadRequest, "more than 1024"},
		{"a key function's long key", httplimit.Rule{Key: func(*http.Request) (string, error) { return long, nil }, Limiters: []limit.Limiter{perMin}},
			nil, http.StatusBadRequest, "more than 1024"},
		{"negative cost", httplimit.Rule{Key: httplimit.Header("X-Key"), Limiters: []limit.Limiter{perMin}, Cost: cost},
			map[string]string{"X-Key": "u", "X-Cost": "-1"}, http.StatusBadRequest, "cost -1 is negative"},
		{"a cost the limiter refuses", httplimit.Rule{Key: httplimit.Header("X-Key"), Limiters: []limit.Limiter{logged}, Cost: cost},
			map[string]string{"X-Key": "u", "X-Cost": "5000"}, http.StatusBadRequest, "cost 5000 is not within [0, 1000]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := tc.rule
			rule.Name, rule.FailOpen = "r", true
			mw, err := httplimit.New([]httplimit.Rule{rule}, httplimit.WithRecorder(rec),
				httplimit.WithOnError(func(*http.Request, string, error) { hooked.Add(1) }))
			require.NoError(t, err)
			ts := httptest.NewServer(mw(okHandler()))
			defer ts.Close()
			for range 5 { // a limit of 3: five would pass a fail-open limit
				req, err := http.NewRequest("GET", ts.URL, nil)
				require.NoError(t, err)
				for k, v := range tc.hdr {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, tc.code, resp.StatusCode, "%s", b)
				require.Contains(t, string(b), tc.body)
			}
		})
	}
	require.Empty(t, scanKeys(t, c, prefix), "a refused input wrote nothing")
	require.Equal(t, 25, rec.count(httplimit.BadKey))
	require.Zero(t, rec.count(httplimit.FailedOpen))
	require.EqualValues(t, 25, hooked.Load(), "the hook sees every bad input")

	// A shadow rule: recorded as BadKey, and the request goes on.
	shadowRec := &countingRecorder{}
	mw, err := httplimit.New([]httplimit.Rule{{Name: "r", Key: httplimit.Header("X-Key"), Limiters: []limit.Limiter{logged}, Cost: cost, Shadow: true}},
		httplimit.WithRecorder(shadowRec))
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	require.Equal(t, http.StatusOK, get(t, ts.URL, map[string]string{"X-Key": "u", "X-Cost": "5000"}).StatusCode)
	require.Equal(t, 1, shadowRec.count(httplimit.BadKey))
	require.Zero(t, shadowRec.count(httplimit.FailedOpen))
	require.Empty(t, scanKeys(t, c, prefix))
}

// TestMiddlewareKeysAllOrNothing: a rule with Also limits several keys of a
// request (per IP and per user) in one decision, in one script call: a
// request the user's limit refuses counts nothing on the IP, so another
// user of the IP keeps its budget; of 40 concurrent users of one IP exactly
// the IP's limit is admitted, and only they count on their users. The
// RateLimit field lists every policy.
func TestMiddlewareKeysAllOrNothing(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis80)
	ctx := ctxT(t)
	c := srv.Client(t)
	s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithBatching(0, 0))
	require.NoError(t, err)
	perIP, err := limit.NewSlidingWindow(s, "perip", 5)
	require.NoError(t, err)
	perUser, err := limit.NewSlidingWindow(s, "peruser", 3)
	require.NoError(t, err)
	rule := httplimit.Rule{Name: "ip", Key: httplimit.Header("X-IP"), Limiters: []limit.Limiter{perIP},
		Also: []httplimit.Part{{Name: "user", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{perUser}}}}
	rec := &countingRecorder{}
	mw, err := httplimit.New([]httplimit.Rule{rule}, httplimit.WithRecorder(rec))
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	req := func(ip, user string) *http.Response {
		return get(t, ts.URL, map[string]string{"X-IP": ip, "X-User": user})
	}
	sum := func(sub, key string) int64 {
		n, err := s.Sub(sub).Sum(ctx, key)
		require.NoError(t, err)
		return n
	}

	// A first request loads the store's library.
	require.Equal(t, http.StatusOK, req("warm", "warm").StatusCode)
	// User a: 3 admitted, the 4th refused by the user's limit.
	before := scriptCalls(t, srv)
	for i := range 3 {
		r := req("i1", "a")
		require.Equal(t, http.StatusOK, r.StatusCode, i)
		require.Equal(t, "perip;q=5;w=60, peruser;q=3;w=60", r.Header.Get("RateLimit-Policy"))
		require.Equal(t, fmt.Sprintf("perip;r=%d;t=60, peruser;r=%d;t=60", 4-i, 2-i), r.Header.Get("RateLimit"))
	}
	r := req("i1", "a")
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode)
	require.Regexp(t, `^perip;r=2;t=\d+, peruser;r=0;t=\d+$`, r.Header.Get("RateLimit"))
	require.EqualValues(t, 4, scriptCalls(t, srv)-before, "one script call per request")
	require.EqualValues(t, 3, sum("perip", "ip:h:i1"), "the refused request counted nothing on the IP")
	// User b of the same IP has the IP's 2 left.
	require.Equal(t, http.StatusOK, req("i1", "b").StatusCode)
	require.Equal(t, http.StatusOK, req("i1", "b").StatusCode)
	r = req("i1", "b")
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode, "the IP's 5 are used")
	require.Regexp(t, `^perip;r=0;t=\d+, peruser;r=1;t=\d+$`, r.Header.Get("RateLimit"))
	require.EqualValues(t, 2, sum("peruser", "user:h:b"), "refused by the IP: nothing counted on the user")

	// 40 users of one IP at once: exactly 5 admitted.
	const callers = 40
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			if req("i2", "u"+strconv.Itoa(i)).StatusCode == http.StatusOK {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 5, admitted.Load())
	require.EqualValues(t, 5, sum("perip", "ip:h:i2"))
	var users int64
	for i := range callers {
		users += sum("peruser", "user:h:u"+strconv.Itoa(i))
	}
	require.EqualValues(t, 5, users, "only the admitted counted on their users")

	// With a local tier, a refusal is remembered under the refusing
	// policy's key: the user's, so the same user from another IP is shed
	// without a server call, and another user of that IP is not.
	mwl, err := httplimit.New([]httplimit.Rule{rule}, httplimit.WithLocalTier(0), httplimit.WithRecorder(rec))
	require.NoError(t, err)
	tsl := httptest.NewServer(mwl(okHandler()))
	defer tsl.Close()
	reql := func(ip, user string) int {
		return get(t, tsl.URL, map[string]string{"X-IP": ip, "X-User": user}).StatusCode
	}
	for range 3 {
		require.Equal(t, http.StatusOK, reql("i4", "c"))
	}
	require.Equal(t, http.StatusTooManyRequests, reql("i4", "c"), "refused by the user's limit")
	calls := scriptCalls(t, srv)
	require.Equal(t, http.StatusTooManyRequests, reql("i5", "c"), "the same user from another IP: shed")
	require.EqualValues(t, calls, scriptCalls(t, srv), "shed without a server call")
	require.Equal(t, 1, rec.count(httplimit.LocalShed))
	require.Equal(t, http.StatusOK, reql("i4", "d"), "another user of the IP: asked, and admitted")

	// Refused rules.
	logged, err := limit.NewLog(c, "log", 3, time.Minute)
	require.NoError(t, err)
	for _, bad := range []httplimit.Rule{
		{Name: "r", Key: httplimit.Header("X-IP"), Limiters: []limit.Limiter{perIP}, Also: []httplimit.Part{{Name: "u", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{logged}}}},
		{Name: "r", Key: httplimit.Header("X-IP"), Limiters: []limit.Limiter{perIP}, Also: []httplimit.Part{{Name: "u", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{perIP}}}},
		{Name: "r", Key: httplimit.Header("X-IP"), Limiters: []limit.Limiter{perIP}, Also: []httplimit.Part{{Name: "r", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{perUser}}}},
		{Name: "r", Key: httplimit.Header("X-IP"), Limiters: []limit.Limiter{perIP}, Also: []httplimit.Part{{Name: "u", Limiters: []limit.Limiter{perUser}}}},
		{Name: "r", Key: httplimit.Header("X-IP"), Limiters: []limit.Limiter{perIP}, Shadow: true, Also: []httplimit.Part{{Name: "u", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{perUser}}}},
	} {
		_, err := httplimit.New([]httplimit.Rule{bad})
		require.ErrorIs(t, err, store.ErrInvalid, "%+v", bad)
	}
	// A part's key that cannot be named: 400, nothing counted.
	r = get(t, ts.URL, map[string]string{"X-IP": "i3"})
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	require.Zero(t, sum("perip", "ip:h:i3"))
}
