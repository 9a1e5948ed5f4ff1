package prom_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/metrics/prom"
)

// The Recorder's metrics, gathered from a registry of their own. In a
// program, pass prometheus.DefaultRegisterer (or your registry) to New and
// the Recorder to the middleware: httplimit.New(rules,
// httplimit.WithRecorder(rec)).
func ExampleRecorder() {
	reg := prometheus.NewRegistry()
	rec, err := prom.New(reg, "myapi")
	if err != nil {
		panic(err)
	}
	// The middleware calls Observe once per decision.
	rec.Observe("api", httplimit.Allowed, 2*time.Millisecond)
	rec.Observe("api", httplimit.Allowed, time.Millisecond)
	rec.Observe("api", httplimit.Refused, time.Millisecond)
	rec.Observe("login", httplimit.BadKey, 0)

	families, err := reg.Gather() // sorted by name, then by labels
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			switch {
			case m.GetCounter() != nil:
				fmt.Printf("%s{%s} %g\n", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue())
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				fmt.Printf("%s{%s} count=%d sum=%.3f\n", f.GetName(), strings.Join(labels, ","), h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	// Output:
	// myapi_ratelimit_decision_seconds{rule=api} count=3 sum=0.004
	// myapi_ratelimit_decision_seconds{rule=login} count=1 sum=0.000
	// myapi_ratelimit_decisions_total{outcome=allowed,rule=api} 2
	// myapi_ratelimit_decisions_total{outcome=bad_request,rule=login} 1
	// myapi_ratelimit_decisions_total{outcome=refused,rule=api} 1
}
