package otel_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
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

// The Observer's metrics, read back from the SDK. A store or a limiter made
// with WithObserver(obs) calls Start and Call itself; here they are called
// by hand, as a store does for two coalesced Adds and a Sum that fails.
func ExampleObserver() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := wsotel.NewObserver(wsotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_, end1 := obs.Start(ctx, "add")
	_, end2 := obs.Start(ctx, "add")
	obs.Call("write", 2, time.Millisecond, nil) // both Adds in one script call
	end1(nil)
	end2(nil)
	_, end3 := obs.Start(ctx, "sum")
	obs.Call("sum", 1, time.Millisecond, nil)
	end3(&store.Error{Op: "sum", Key: "user:42", Kind: store.ErrWrongType})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string // the SDK's data points come in no set order
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, labels(p.Attributes), p.Value))
			}
		case metricdata.Histogram[int64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%d", m.Name, labels(p.Attributes), p.Count, p.Sum))
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} count=%d", m.Name, labels(p.Attributes), p.Count))
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// windowstore.operation.duration{op=add} count=2
	// windowstore.operation.duration{op=sum} count=1
	// windowstore.operations.active{op=add} 0
	// windowstore.operations.active{op=sum} 0
	// windowstore.operations{op=add,outcome=ok} 2
	// windowstore.operations{op=sum,outcome=wrong_type} 1
	// windowstore.script.batch_size{script=sum} count=1 sum=1
	// windowstore.script.batch_size{script=write} count=1 sum=2
	// windowstore.script.calls{outcome=ok,script=sum} 1
	// windowstore.script.calls{outcome=ok,script=write} 1
	// windowstore.script.duration{script=sum} count=1
	// windowstore.script.duration{script=write} count=1
}

// labels prints an attribute set as k=v,k=v, sorted by key.
func labels(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return strings.Join(kv, ",")
}
