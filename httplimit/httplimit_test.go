package httplimit

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// stubLimiter answers from a function; the middleware's own logic is tested
// here, the limiters on real servers in the integration suite.
type stubLimiter struct {
	p  limit.Policy
	fn func(key string, n int64) (store.Decision, error)
}

func (s stubLimiter) Policy() limit.Policy { return s.p }
func (s stubLimiter) Allow(_ context.Context, key string, n int64) (store.Decision, error) {
	return s.fn(key, n)
}
func (s stubLimiter) AllowAt(_ context.Context, _ time.Time, key string, n int64) (store.Decision, error) {
	return s.fn(key, n)
}

func do(t *testing.T, h http.Handler, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	ts := httptest.NewServer(h)
	defer ts.Close()
	req, _ := http.NewRequest("GET", ts.URL, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

type rec struct {
	mu  sync.Mutex
	got []Outcome
}

func (r *rec) Observe(_ string, o Outcome, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, o)
}

func TestKeyErrorsAreBadRequests(t *testing.T) {
	admit := stubLimiter{limit.Policy{Name: "p", Limit: 5, Window: time.Second}, func(string, int64) (store.Decision, error) {
		return store.Decision{Allowed: true, Limit: 5, Remaining: 4}, nil
	}}
	var hooked []error
	r := &rec{}
	tests := []struct {
		name string
		key  KeyFunc
		hdr  map[string]string
		code int
		body string
	}{
		{"header present", Header("X-User"), map[string]string{"X-User": "u"}, 200, "ok"},
		{"header missing", Header("X-User"), nil, 400, "bad request: no X-User header"},
		{"BadRequest from a KeyFunc", KeyFunc(func(*http.Request) (string, error) { return "", BadRequest("tenant unknown") }), nil, 400, "bad request: tenant unknown"},
		{"other errors leak nothing", KeyFunc(func(*http.Request) (string, error) { return "", errors.New("db password wrong") }), nil, 400, "bad request: no key in the request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := New([]Rule{{Name: "r", Key: tt.key, Limiters: []limit.Limiter{admit}}},
				WithOnError(func(_ *http.Request, _ string, err error) { hooked = append(hooked, err) }), WithRecorder(r))
			if err != nil {
				t.Fatal(err)
			}
			code, body, _ := do(t, mw(ok), tt.hdr)
			if code != tt.code || body != tt.body {
				t.Fatalf("got %d %q, want %d %q", code, body, tt.code, tt.body)
			}
		})
	}
	if len(hooked) != 3 || !errors.Is(hooked[0], ErrNoKey) || !errors.Is(hooked[1], ErrNoKey) {
		t.Fatalf("hook saw %v", hooked)
	}
	if r.got[1] != BadKey {
		t.Fatalf("outcomes %v", r.got)
	}
}

func TestLimiterFailures(t *testing.T) {
	down := stubLimiter{limit.Policy{Name: "p", Limit: 5, Window: time.Second}, func(string, int64) (store.Decision, error) {
		return store.Decision{}, errors.New("connection refused")
	}}
	for _, open := range []bool{false, true} {
		mw, err := New([]Rule{{Name: "r", Key: Header("X-User"), Limiters: []limit.Limiter{down}, FailOpen: open}})
		if err != nil {
			t.Fatal(err)
		}
		code, _, _ := do(t, mw(ok), map[string]string{"X-User": "u"})
		want := http.StatusServiceUnavailable
		if open {
			want = 200
		}
		if code != want {
			t.Fatalf("fail open %v: %d, want %d", open, code, want)
		}
	}
}

func TestRefusalHeaders(t *testing.T) {
	refuse := stubLimiter{limit.Policy{Name: "persec", Limit: 3, Window: 10 * time.Second}, func(string, int64) (store.Decision, error) {
		return store.Decision{Allowed: false, Limit: 3, RetryAfter: 6500 * time.Millisecond, ResetAfter: 9 * time.Second}, nil
	}}
	mw, err := New([]Rule{{Name: "r", Key: Header("X-User"), Limiters: []limit.Limiter{refuse}}}, WithLegacyHeaders())
	if err != nil {
		t.Fatal(err)
	}
	code, _, h := do(t, mw(ok), map[string]string{"X-User": "u"})
	if code != 429 || h.Get("Retry-After") != "7" || h.Get("RateLimit") != "persec;r=0;t=7" ||
		h.Get("RateLimit-Policy") != "persec;q=3;w=10" || h.Get("X-RateLimit-Limit") != "3" {
		t.Fatalf("%d %v", code, h)
	}
}

func TestNewRefusesBadRules(t *testing.T) {
	l := stubLimiter{p: limit.Policy{Name: "p"}}
	for _, r := range []Rule{
		{Name: "", Key: Header("x"), Limiters: []limit.Limiter{l}},
		{Name: "r", Limiters: []limit.Limiter{l}},
		{Name: "r", Key: Header("x")},
		{Name: "r", Key: Header("x"), Limiters: []limit.Limiter{nil}},
	} {
		if _, err := New([]Rule{r}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// TestShadow: a shadow rule never answers nor sets a header field, tells the
// hook and the recorder of its would-be refusals, stops at its first refusal
// as an enforced rule would, and leaves the request to the enforced rule
// after it; a shadow limiter in an enforced rule lets the request through.
func TestShadow(t *testing.T) {
	refusal := store.Decision{Allowed: false, Limit: 3, RetryAfter: 6500 * time.Millisecond, ResetAfter: 9 * time.Second, Policy: "persec"}
	var asked []string
	stub := func(name string, d store.Decision) stubLimiter {
		return stubLimiter{limit.Policy{Name: name, Limit: 3, Window: 10 * time.Second}, func(key string, _ int64) (store.Decision, error) {
			asked = append(asked, name+" "+key)
			return d, nil
		}}
	}
	refuse := stub("persec", refusal)
	after := stub("perhour", store.Decision{Allowed: true, Limit: 100, Remaining: 99, Policy: "perhour"})
	admit := stub("enforced", store.Decision{Allowed: true, Limit: 5, Remaining: 4, Policy: "enforced"})
	type hooked struct {
		rule string
		d    store.Decision
	}
	var hooks []hooked
	r := &rec{}
	mw, err := New([]Rule{
		{Name: "watch", Key: Header("X-User"), Limiters: []limit.Limiter{refuse, after}, Shadow: true},
		{Name: "badkey", Key: Header("X-None"), Limiters: []limit.Limiter{after}, Shadow: true},
		{Name: "api", Key: Header("X-User"), Limiters: []limit.Limiter{admit}},
	}, WithRecorder(r), WithOnShadowRefusal(func(_ *http.Request, rule string, d store.Decision) { hooks = append(hooks, hooked{rule, d}) }))
	if err != nil {
		t.Fatal(err)
	}
	code, body, h := do(t, mw(ok), map[string]string{"X-User": "u"})
	if code != 200 || body != "ok" || h.Get("RateLimit") != "enforced;r=4;t=0" || h.Get("RateLimit-Policy") != "enforced;q=3;w=10" {
		t.Fatalf("%d %q %v", code, body, h)
	}
	if !slices.Equal(asked, []string{"persec watch:h:u", "enforced api:h:u"}) {
		t.Fatalf("asked %q: the refusal must stop the shadow rule, and the enforced rule must still apply", asked)
	}
	want := refusal
	want.Allowed, want.WouldRefuse = true, true
	if len(hooks) != 1 || hooks[0].rule != "watch" || !reflect.DeepEqual(hooks[0].d, want) {
		t.Fatalf("hook saw %+v", hooks)
	}
	if !slices.Equal(r.got, []Outcome{ShadowRefused, BadKey, Allowed}) {
		t.Fatalf("outcomes %v", r.got)
	}

	// A shadow limiter in an enforced rule: admitted, the limiters after it
	// asked, the headers from the others.
	asked, hooks, r.got = nil, nil, nil
	mw, err = New([]Rule{{Name: "api", Key: Header("X-User"), Limiters: []limit.Limiter{limit.Shadow(refuse), after}}},
		WithRecorder(r), WithOnShadowRefusal(func(_ *http.Request, rule string, d store.Decision) { hooks = append(hooks, hooked{rule, d}) }))
	if err != nil {
		t.Fatal(err)
	}
	code, _, h = do(t, mw(ok), map[string]string{"X-User": "u"})
	if code != 200 || h.Get("RateLimit") != "perhour;r=99;t=0" || len(asked) != 2 || len(hooks) != 1 ||
		!hooks[0].d.WouldRefuse || !slices.Equal(r.got, []Outcome{ShadowRefused}) {
		t.Fatalf("%d %v asked %q hooks %+v outcomes %v", code, h, asked, hooks, r.got)
	}
}

// TestDegraded: a degraded limiter whose server is down answers in process:
// 200 then 429 on the instance's share, with header fields from the
// in-process window, recorded as degraded_allowed and degraded_refused.
// (That the RateLimit-Policy field lists a limit.Combine's every policy is
// checked on a real server, by tests/httplimit_test.go.)
func TestDegraded(t *testing.T) {
	down := stubLimiter{limit.Policy{Name: "persec", Limit: 4, Window: 10 * time.Second}, func(string, int64) (store.Decision, error) {
		return store.Decision{}, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	}}
	d, err := limit.Degrade(down, limit.WithInstances(2))
	if err != nil {
		t.Fatal(err)
	}
	r := &rec{}
	mw, err := New([]Rule{{Name: "api", Key: Header("X-User"), Limiters: []limit.Limiter{d}}}, WithRecorder(r), WithLocalTier(0))
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	var h http.Header
	for i := 0; i < 3; i++ {
		var code int
		code, _, h = do(t, mw(ok), map[string]string{"X-User": "u"})
		codes = append(codes, code)
	}
	if !slices.Equal(codes, []int{200, 200, 429}) || h.Get("RateLimit") != "persec;r=0;t=10" || h.Get("Retry-After") != "10" ||
		h.Get("RateLimit-Policy") != "persec;q=4;w=10" {
		t.Fatalf("%v %v", codes, h)
	}
	if !slices.Equal(r.got, []Outcome{DegradedAllowed, DegradedAllowed, DegradedRefused}) {
		t.Fatalf("outcomes %v", r.got)
	}
	if code, _, _ := do(t, mw(ok), map[string]string{"X-User": "u"}); code != 429 || r.got[len(r.got)-1] != DegradedRefused {
		t.Fatalf("a degraded refusal went to the local tier: %d %v", code, r.got)
	}
	if d.State() != "open" || !errors.Is(d.Health(), limit.ErrServerDown) {
		t.Fatalf("breaker %v, health %v", d.State(), d.Health())
	}
}
