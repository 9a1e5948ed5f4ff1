package otel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/internal/limittest"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// collect reads every metric of reader by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Fatalf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// key names an attribute set as "k=v,k=v", in the set's order.
func key(s attribute.Set) string {
	var b []byte
	for _, kv := range s.ToSlice() {
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%s=%s", kv.Key, kv.Value.String())
	}
	return string(b)
}

func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 sum", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, p := range s.DataPoints {
		out[key(p.Attributes)] = p.Value
	}
	return out
}

func counts[N int64 | float64](t *testing.T, m metricdata.Metrics) map[string]uint64 {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("%s: %T", m.Name, m.Data)
	}
	out := map[string]uint64{}
	for _, p := range h.DataPoints {
		out[key(p.Attributes)] = p.Count
	}
	return out
}

func equal[V comparable](t *testing.T, what string, got, want map[string]V) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

func TestRecorder(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	r, err := NewRecorder(WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), WithPrefix("t"))
	if err != nil {
		t.Fatal(err)
	}
	r.Observe("api", httplimit.Allowed, time.Millisecond)
	r.Observe("api", httplimit.Allowed, time.Millisecond)
	r.Observe("api", httplimit.Refused, 2*time.Millisecond)
	r.Observe("api", httplimit.ShadowRefused, time.Millisecond)
	r.Observe("login", httplimit.FailedClosed, time.Second)
	r.Observe("api", httplimit.DegradedRefused, time.Millisecond)
	got := collect(t, reader)
	if len(got) != 2 { // no breaker watched: no gauge point
		t.Fatalf("metrics %v", got)
	}
	m := got["t.ratelimit.decisions"]
	if m.Unit != "{decision}" {
		t.Fatalf("unit %q", m.Unit)
	}
	if s := m.Data.(metricdata.Sum[int64]); !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
		t.Fatalf("decisions: %+v", s)
	}
	equal(t, "decisions", sums(t, m), map[string]int64{
		"outcome=allowed,rule=api":          2,
		"outcome=refused,rule=api":          1,
		"outcome=shadow_refused,rule=api":   1,
		"outcome=degraded_refused,rule=api": 1,
		"outcome=failed_closed,rule=login":  1,
	})
	lat := got["t.ratelimit.decision"]
	if lat.Unit != "s" {
		t.Fatalf("unit %q", lat.Unit)
	}
	equal(t, "latency", counts[float64](t, lat), map[string]uint64{"rule=api": 5, "rule=login": 1})
	h := lat.Data.(metricdata.Histogram[float64])
	for _, p := range h.DataPoints {
		if p.Attributes.Encoded(attribute.DefaultEncoder()) == "rule=login" && p.Sum != 1 {
			t.Fatalf("login latency sum %v, want 1 (seconds)", p.Sum)
		}
		if len(p.Bounds) != len(secondsBuckets) {
			t.Fatalf("bounds %v", p.Bounds)
		}
	}
}

func TestObserver(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	o, err := NewObserver(
		WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, endAdd := o.Start(ctx, "add")
	_, endSum := o.Start(ctx, "sum")
	// In flight: one add, one sum.
	equal(t, "active", sums(t, collect(t, reader)["windowstore.operations.active"]), map[string]int64{"op=add": 1, "op=sum": 1})
	o.Call("write", 3, time.Millisecond, nil)
	o.Call("write", 1, time.Millisecond, context.DeadlineExceeded)
	endAdd(nil)
	endAdd(errors.New("twice")) // ignored
	endSum(&store.Error{Op: "sum", Kind: store.ErrWrongType})
	sctx, endAllow := o.Start(ctx, "allow")
	if !spanOf(sctx).IsValid() {
		t.Fatal("no span in the operation's context")
	}
	endAllow(fmt.Errorf("wrapped: %w", context.Canceled))

	got := collect(t, reader)
	equal(t, "operations", sums(t, got["windowstore.operations"]), map[string]int64{
		"op=add,outcome=ok": 1, "op=sum,outcome=wrong_type": 1, "op=allow,outcome=canceled": 1,
	})
	equal(t, "active", sums(t, got["windowstore.operations.active"]), map[string]int64{"op=add": 0, "op=sum": 0, "op=allow": 0})
	equal(t, "duration", counts[float64](t, got["windowstore.operation.duration"]), map[string]uint64{"op=add": 1, "op=sum": 1, "op=allow": 1})
	equal(t, "calls", sums(t, got["windowstore.script.calls"]), map[string]int64{
		"outcome=ok,script=write": 1, "outcome=deadline_exceeded,script=write": 1,
	})
	equal(t, "batch", counts[int64](t, got["windowstore.script.batch_size"]), map[string]uint64{"script=write": 2})
	h := got["windowstore.script.batch_size"].Data.(metricdata.Histogram[int64])
	if p := h.DataPoints[0]; p.Sum != 4 {
		t.Fatalf("batch sum %d, want 4", p.Sum)
	}

	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans", len(ended))
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		byName[s.Name()] = s
	}
	if s := byName["windowstore.add"]; s == nil || s.Status().Code != codes.Unset || len(s.Events()) != 0 {
		t.Fatalf("add span %+v", s)
	}
	s := byName["windowstore.sum"]
	if s == nil || s.Status().Code != codes.Error || len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Fatalf("sum span %+v", s)
	}
	attrs := attribute.NewSet(s.Attributes()...)
	if v, _ := attrs.Value(SpanKeyOutcome); v.AsString() != "wrong_type" {
		t.Fatalf("sum span attributes %v", s.Attributes())
	}
	if v, _ := attrs.Value(SpanKeyOp); v.AsString() != "sum" {
		t.Fatalf("sum span attributes %v", s.Attributes())
	}
}

func TestObserverNoTracer(t *testing.T) {
	o, err := NewObserver(WithMeterProvider(sdkmetric.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, end := o.Start(ctx, "add")
	end(nil)
	if got != ctx {
		t.Fatal("without a tracer, Start must return the caller's context")
	}
}

func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil:                              "ok",
		store.ErrInvalid:                 "invalid",
		store.ErrWrongType:               "wrong_type",
		store.ErrOverflow:                "overflow",
		store.ErrUnavailable:             "unavailable",
		limit.ErrServerDown:              "unavailable",
		store.ErrOutOfMemory:             "out_of_memory",
		store.ErrNoPermission:            "no_permission",
		store.ErrClock:                   "clock",
		store.ErrTooOld:                  "too_old",
		store.ErrFuture:                  "future",
		context.DeadlineExceeded:         "deadline_exceeded",
		context.Canceled:                 "canceled",
		errors.New("connection refused"): "error",
		&store.Error{Op: "add", Kind: store.ErrOverflow, Err: errors.New("x")}: "overflow",
		&store.Error{Op: "add", Err: context.DeadlineExceeded}:                 "deadline_exceeded",
		&store.Error{Op: "perminute", Kind: limit.ErrServerDown}:               "unavailable",
	} {
		if got := Outcome(err); got != want {
			t.Errorf("Outcome(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestConcurrent runs an Observer and a Recorder from many goroutines (for
// go test -race).
func TestConcurrent(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o, err := NewObserver(WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRecorder(WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 100 {
				_, end := o.Start(context.Background(), fmt.Sprint("op", i%3))
				o.Call("write", g, time.Microsecond, nil)
				r.Observe("api", httplimit.Allowed, time.Microsecond)
				end(nil)
			}
		}()
	}
	for range 8 {
		<-done
	}
	got := collect(t, reader)
	var total int64
	for _, v := range sums(t, got["windowstore.operations"]) {
		total += v
	}
	if total != 800 {
		t.Fatalf("%d operations, want 800", total)
	}
	equal(t, "decisions", sums(t, got["ratelimit.decisions"]), map[string]int64{"outcome=allowed,rule=api": 800})
}

func spanOf(ctx context.Context) trace.SpanContext { return trace.SpanContextFromContext(ctx) }

// odd is a breaker in a state the gauge has no value for.
type odd struct{}

func (odd) State() string { return "unknown" }

func TestRecorderBreakers(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	r, err := NewRecorder(WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	a, aServer := limittest.Degraded(t)
	b, bServer := limittest.Degraded(t)
	c, _ := limittest.Degraded(t)
	r.WatchBreaker("a", a)
	r.WatchBreaker("b", c)
	r.WatchBreaker("b", b) // replaces
	r.WatchBreaker("c", c)
	r.watch("odd", odd{}) // a state without a value: not reported
	bServer.Err = io.EOF  // b's server fails: its breaker opens
	if _, err := b.Allow(context.Background(), "k", 1); err != nil || b.State() != "open" {
		t.Fatalf("Allow: %v; state %q", err, b.State())
	}
	gauge := func() map[string]int64 {
		m := collect(t, reader)["ratelimit.breaker_state"]
		g, ok := m.Data.(metricdata.Gauge[int64])
		if !ok {
			t.Fatalf("%T", m.Data)
		}
		out := map[string]int64{}
		for _, p := range g.DataPoints {
			out[key(p.Attributes)] = p.Value
		}
		return out
	}
	equal(t, "breakers", gauge(), map[string]int64{"limiter=a": 0, "limiter=b": 2, "limiter=c": 0})
	aServer.Err = io.EOF // a's server fails: open too
	if _, err := a.Allow(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	equal(t, "breakers", gauge(), map[string]int64{"limiter=a": 2, "limiter=b": 2, "limiter=c": 0})
	r.watch("b", limittest.State("half-open")) // b's cool-down over: half-open
	r.WatchBreaker("c", nil)                   // stops watching c
	equal(t, "breakers", gauge(), map[string]int64{"limiter=a": 2, "limiter=b": 1})
}
