package otel_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	wsotel "github.com/windowstore/windowstore/metrics/otel"
	"github.com/windowstore/windowstore/store"
)

// Instrument a store, a limiter and the middleware. The example needs a
// server, so it is compiled but not run by go test (tests/otel_test.go runs
// the same setup on a real server).
func Example() {
	// The providers: in production, with an exporter (OTLP, Prometheus...).
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) }()

	// One Observer serves every store and limiter.
	obs, err := wsotel.NewObserver(wsotel.WithMeterProvider(mp), wsotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	rec, err := wsotel.NewRecorder(wsotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}

	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	views, err := store.New(ctx, client, store.Window{Length: time.Hour, Bucket: time.Minute},
		store.WithPrefix("views:"), store.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	perIP, err := limit.NewGCRA(client, "perip", 10, time.Second, 20, limit.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.ClientIP(), Limiters: []limit.Limiter{perIP}}},
		httplimit.WithRecorder(rec))
	if err != nil {
		panic(err)
	}

	// Every Add is an operation "add" (a span windowstore.add) and goes out
	// in a script call "write"; every request is a decision of rule "api".
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, err := views.Add(r.Context(), r.URL.Path, 1); err != nil {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		}
	})
	_ = http.ListenAndServe(":8080", mw(mux))
}

// The Recorder's metrics, read back from the SDK.
func ExampleRecorder() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec, err := wsotel.NewRecorder(wsotel.WithMeterProvider(mp), wsotel.WithPrefix("myapi"))
	if err != nil {
		panic(err)
	}
	// The middleware calls Observe once per decision.
	rec.Observe("api", httplimit.Allowed, 2*time.Millisecond)
	rec.Observe("api", httplimit.Allowed, time.Millisecond)
	rec.Observe("api", httplimit.Refused, time.Millisecond)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				o, _ := p.Attributes.Value(wsotel.KeyOutcome)
				fmt.Printf("%s outcome=%s: %d\n", m.Name, o.AsString(), p.Value)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				fmt.Printf("%s (%s): %d decisions, %.3f s in all\n", m.Name, m.Unit, p.Count, p.Sum)
			}
		}
	}
	// Unordered output:
	// myapi.ratelimit.decisions outcome=allowed: 2
	// myapi.ratelimit.decisions outcome=refused: 1
	// myapi.ratelimit.decision (s): 3 decisions, 0.004 s in all
}
