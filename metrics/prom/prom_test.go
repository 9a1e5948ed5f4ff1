package prom

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/internal/limittest"
	"github.com/windowstore/windowstore/limit"
)

// fail has d's server fail once: its breaker opens.
func fail(t *testing.T, d *limit.Degraded, f *limittest.Flaky) {
	t.Helper()
	f.Err = io.EOF
	dec, err := d.Allow(context.Background(), "k", 1)
	if err != nil || !dec.Degraded || d.State() != "open" {
		t.Fatalf("Allow: %+v, %v; state %q", dec, err, d.State())
	}
	f.Err = nil
}

func TestRecorder(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg, "t")
	if err != nil {
		t.Fatal(err)
	}
	login, loginServer := limittest.Degraded(t)
	api, _ := limittest.Degraded(t)
	fail(t, login, loginServer)
	r.Observe("api", httplimit.Allowed, time.Millisecond)
	r.Observe("api", httplimit.Allowed, time.Millisecond)
	r.Observe("api", httplimit.Refused, 2*time.Millisecond)
	r.Observe("login", httplimit.FailedClosed, time.Second)
	r.Observe("login", httplimit.DegradedRefused, time.Millisecond)
	r.WatchBreaker("login", login)
	r.WatchBreaker("api", api)
	want := `
# HELP t_ratelimit_decisions_total Rate-limiting decisions, by rule and outcome.
# TYPE t_ratelimit_decisions_total counter
t_ratelimit_decisions_total{outcome="allowed",rule="api"} 2
t_ratelimit_decisions_total{outcome="degraded_refused",rule="login"} 1
t_ratelimit_decisions_total{outcome="failed_closed",rule="login"} 1
t_ratelimit_decisions_total{outcome="refused",rule="api"} 1
# HELP t_ratelimit_breaker_state State of a degraded limiter's circuit breaker: 0 closed, 1 half-open, 2 open.
# TYPE t_ratelimit_breaker_state gauge
t_ratelimit_breaker_state{limiter="api"} 0
t_ratelimit_breaker_state{limiter="login"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "t_ratelimit_decisions_total", "t_ratelimit_breaker_state"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r.latency); n != 2 {
		t.Fatalf("%d latency series, want 2", n)
	}
	if _, err := New(reg, "t"); err == nil {
		t.Fatal("registering twice must fail")
	}
}

func TestWatchBreaker(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg, "")
	if err != nil {
		t.Fatal(err)
	}
	d, server := limittest.Degraded(t)
	r.WatchBreaker("a", d)
	r.WatchBreaker("b", d)
	other, _ := limittest.Degraded(t)
	r.WatchBreaker("b", other) // replaces
	r.watch("odd", odd{})      // a state without a value: not reported
	gauge := func(want string) {
		t.Helper()
		want = "# HELP ratelimit_breaker_state State of a degraded limiter's circuit breaker: 0 closed, 1 half-open, 2 open.\n" +
			"# TYPE ratelimit_breaker_state gauge\n" + want
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_breaker_state"); err != nil {
			t.Fatal(err)
		}
	}
	gauge("ratelimit_breaker_state{limiter=\"a\"} 0\nratelimit_breaker_state{limiter=\"b\"} 0\n")
	fail(t, d, server)
	gauge("ratelimit_breaker_state{limiter=\"a\"} 2\nratelimit_breaker_state{limiter=\"b\"} 0\n")
	r.watch("a", limittest.State("half-open")) // a cool-down over: the next call probes
	gauge("ratelimit_breaker_state{limiter=\"a\"} 1\nratelimit_breaker_state{limiter=\"b\"} 0\n")
	r.WatchBreaker("b", nil) // stops watching
	gauge("ratelimit_breaker_state{limiter=\"a\"} 1\n")
}

// odd is a breaker in a state the gauge has no value for.
type odd struct{}

func (odd) State() string { return "unknown" }
