// Package prom records windowstore's HTTP rate-limiting decisions as
// Prometheus metrics. It is a module of its own so that the core stays free
// of the Prometheus client.
//
//	rec, err := prom.New(prometheus.DefaultRegisterer, "myapi")
//	mw, err := httplimit.New(rules, httplimit.Options{Metrics: rec})
//
// Metrics, labelled by rule:
//
//	<ns>_ratelimit_decisions_total{rule, outcome}   outcome: allowed, refused, local_shed, failed_open, failed_closed
//	<ns>_ratelimit_decision_seconds{rule}           time spent deciding (histogram)
//
// Refusals are outcome="refused" plus "local_shed"; errors are "failed_open"
// plus "failed_closed".
package prom

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/windowstore/windowstore/httplimit"
)

// Recorder is an httplimit.Recorder that feeds Prometheus. It is safe for
// concurrent use. Its zero value is not usable; create one with New.
type Recorder struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

var _ httplimit.Recorder = (*Recorder)(nil)

// New registers the metrics with reg under the namespace ns (may be empty).
func New(reg prometheus.Registerer, ns string) (*Recorder, error) {
	r := &Recorder{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "ratelimit_decisions_total",
			Help: "Rate-limiting decisions, by rule and outcome.",
		}, []string{"rule", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "ratelimit_decision_seconds",
			Help:    "Time spent deciding, including the round trips to the server.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"rule"}),
	}
	for _, c := range []prometheus.Collector{r.decisions, r.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("prom: register: %w", err)
		}
	}
	return r, nil
}

// Observe records one decision.
func (r *Recorder) Observe(rule string, o httplimit.Outcome, d time.Duration) {
	r.decisions.WithLabelValues(rule, string(o)).Inc()
	r.latency.WithLabelValues(rule).Observe(d.Seconds())
}
