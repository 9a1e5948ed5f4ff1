// Package prom records windowstore's HTTP rate-limiting decisions as
// Prometheus metrics. It is a module of its own so that the core stays free
// of the Prometheus client.
//
//	rec, err := prom.New(prometheus.DefaultRegisterer, "myapi")
//	mw, err := httplimit.New(rules, httplimit.WithRecorder(rec))
//
// Metrics, labelled by rule:
//
//	<ns>_ratelimit_decisions_total{rule, outcome}   outcome: allowed, refused, local_shed, failed_open, failed_closed, bad_request, shadow_refused, degraded_allowed, degraded_refused
//	<ns>_ratelimit_decision_seconds{rule}           time spent deciding (histogram)
//	<ns>_ratelimit_breaker_state{limiter}           0 closed, 1 half-open, 2 open (WatchBreaker)
//
// Refusals are outcome="refused" plus "local_shed"; errors are "failed_open"
// plus "failed_closed". Would-be refusals, admitted because a shadow rule
// or a shadow limiter only watches (httplimit.Rule.Shadow, limit.Shadow), are
// "shadow_refused". Decisions made in process while a degraded limiter's
// server fails (limit.Degrade) are "degraded_allowed" and "degraded_refused";
// the limiter's circuit breaker is a gauge read at each scrape, once
// WatchBreaker names it.
package prom

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
)

// Recorder is an httplimit.Recorder that feeds Prometheus. It is safe for
// concurrent use. Its zero value is not usable; create one with New.
type Recorder struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	breakers  *breakers
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
		breakers: &breakers{desc: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "ratelimit_breaker_state"),
			"State of a degraded limiter's circuit breaker: 0 closed, 1 half-open, 2 open.", []string{"limiter"}, nil),
			m: map[string]breaker{}},
	}
	for _, c := range []prometheus.Collector{r.decisions, r.latency, r.breakers} {
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

// WatchBreaker exports d's circuit breaker state as
// ratelimit_breaker_state{limiter=name}, read at each scrape: 0 for "closed",
// 1 for "half-open", 2 for "open" (limit.Degraded.State). A second call with
// the same name replaces the first; a nil d stops watching name.
func (r *Recorder) WatchBreaker(name string, d *limit.Degraded) {
	var b breaker // nil for a nil d, not an interface holding a nil pointer
	if d != nil {
		b = d
	}
	r.watch(name, b)
}

// breaker is what the gauge reads of a limit.Degraded.
type breaker interface{ State() string }

func (r *Recorder) watch(name string, b breaker) {
	r.breakers.mu.Lock()
	defer r.breakers.mu.Unlock()
	if b == nil {
		delete(r.breakers.m, name)
		return
	}
	r.breakers.m[name] = b
}

// breakerValues are the gauge's values of the breaker's states.
var breakerValues = map[string]float64{"closed": 0, "half-open": 1, "open": 2}

// breakers collects the watched breakers' states.
type breakers struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	m    map[string]breaker
}

func (b *breakers) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *breakers) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, br := range b.m {
		if v, ok := breakerValues[br.State()]; ok {
			ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, v, name)
		}
	}
}
