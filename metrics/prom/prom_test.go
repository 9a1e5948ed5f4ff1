package prom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
)

// state is a breaker that stays in one state.
type state limit.BreakerState

func (s state) State() limit.BreakerState { return limit.BreakerState(s) }
func (s state) Health() error             { return nil }

func TestRecorder(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := New(reg, "t")
	if err != nil {
		t.Fatal(err)
	}
	r.Observe("api", httplimit.Allowed, time.Millisecond)
	r.Observe("api", httplimit.Allowed, time.Millisecond)
	r.Observe("api", httplimit.Refused, 2*time.Millisecond)
	r.Observe("login", httplimit.FailedShut, time.Second)
	r.Observe("login", httplimit.DegradedRefused, time.Millisecond)
	r.WatchBreaker("login", state(limit.BreakerOpen))
	r.WatchBreaker("api", state(limit.BreakerClosed))
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
