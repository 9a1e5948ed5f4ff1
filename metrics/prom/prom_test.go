package prom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/windowstore/windowstore/httplimit"
)

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
	want := `
# HELP t_ratelimit_decisions_total Rate-limiting decisions, by rule and outcome.
# TYPE t_ratelimit_decisions_total counter
t_ratelimit_decisions_total{outcome="allowed",rule="api"} 2
t_ratelimit_decisions_total{outcome="failed_closed",rule="login"} 1
t_ratelimit_decisions_total{outcome="refused",rule="api"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "t_ratelimit_decisions_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r.latency); n != 2 {
		t.Fatalf("%d latency series, want 2", n)
	}
	if _, err := New(reg, "t"); err == nil {
		t.Fatal("registering twice must fail")
	}
}
