package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	wsotel "github.com/windowstore/windowstore/metrics/otel"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// otelData is what a ManualReader collected, by instrument name.
type otelData map[string]metricdata.Metrics

func collectOTel(t *testing.T, r *sdkmetric.ManualReader) otelData {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := otelData{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, wsotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrKey names an attribute set "k=v,k=v", keys sorted.
func attrKey(s attribute.Set) string {
	var b []byte
	for i, kv := range s.ToSlice() {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%s=%s", kv.Key, kv.Value.String())
	}
	return string(b)
}

// sums are the values of an int64 sum, by attribute set; zeros left out.
func (d otelData) sums(t *testing.T, name string) map[string]int64 {
	t.Helper()
	s, ok := d[name].Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s: %T", name, d[name].Data)
	out := map[string]int64{}
	for _, p := range s.DataPoints {
		if p.Value != 0 {
			out[attrKey(p.Attributes)] = p.Value
		}
	}
	return out
}

// hist is a histogram's count and sum by attribute set.
type hist struct {
	count uint64
	sum   float64
}

func histOf[N int64 | float64](t *testing.T, d otelData, name string) map[string]hist {
	t.Helper()
	h, ok := d[name].Data.(metricdata.Histogram[N])
	require.True(t, ok, "%s: %T", name, d[name].Data)
	out := map[string]hist{}
	for _, p := range h.DataPoints {
		out[attrKey(p.Attributes)] = hist{p.Count, float64(p.Sum)}
	}
	return out
}

// TestOTelObserver runs a store and a limiter on a real server with an
// OpenTelemetry Observer, and reads back the operations by op and outcome,
// the script calls and their batch sizes, the latencies, and the spans.
func TestOTelObserver(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	prefix := harness.Prefix(t)
	ctx := ctxT(t)
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := wsotel.NewObserver(
		wsotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		wsotel.WithTracerProvider(tp))
	require.NoError(t, err)

	s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second},
		store.WithPrefix(prefix), store.WithObserver(obs))
	require.NoError(t, err)
	// store.New itself tells the observer nothing.
	require.Empty(t, collectOTel(t, reader))

	// The operations run under a parent span: theirs are its children.
	ctx, parent := tp.Tracer("test").Start(ctx, "request")

	// 20 concurrent Adds over 4 keys: the store may coalesce them into fewer
	// script calls, each carrying several.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			_, err := s.Add(ctx, fmt.Sprint("k", i%4), 1)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	for i := range 3 {
		n, err := s.Sum(ctx, fmt.Sprint("k", i))
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
	}
	sums, err := s.SumMany(ctx, []string{"k0", "k1", "k2", "k3"})
	require.NoError(t, err)
	require.Equal(t, []int64{5, 5, 5, 5}, sums)

	// Allow: admitted, then refused (a refusal is not an error); then a
	// limit the store refuses to send (invalid).
	r, err := s.Allow(ctx, "a", 1, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, err = s.Allow(ctx, "a", 1, 1)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	_, err = s.Allow(ctx, "a", -1, 1)
	require.ErrorIs(t, err, store.ErrInvalid)

	// A key that holds a string: the server's error, given its kind.
	srv.Cmd(t, "SET", counterKey(t, s, "str"), "x")
	_, err = s.Add(ctx, "str", 1)
	require.ErrorIs(t, err, store.ErrWrongType)

	// A limiter: admitted, refused, invalid.
	l, err := limit.NewLog(c, "perkey", 1, time.Minute, limit.WithPrefix(prefix), limit.WithObserver(obs))
	require.NoError(t, err)
	d, err := l.Allow(ctx, "u", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = l.Allow(ctx, "u", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	_, err = l.Allow(ctx, "u", -1)
	require.ErrorIs(t, err, store.ErrInvalid)

	// A deadline already past.
	dead, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = s.Sum(dead, "k0")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	parent.End()

	got := collectOTel(t, reader)
	require.Equal(t, map[string]int64{
		"op=add,outcome=ok":                20,
		"op=add,outcome=wrong_type":        1,
		"op=sum,outcome=ok":                3,
		"op=sum,outcome=deadline_exceeded": 1,
		"op=sum many,outcome=ok":           1,
		"op=allow,outcome=ok":              4, // 2 of the store, 2 of the limiter
		"op=allow,outcome=invalid":         2,
	}, got.sums(t, "windowstore.operations"))
	// Nothing is left in flight.
	require.Empty(t, got.sums(t, "windowstore.operations.active"))
	lat := histOf[float64](t, got, "windowstore.operation.duration")
	require.Equal(t, map[string]uint64{"op=add": 21, "op=sum": 4, "op=sum many": 1, "op=allow": 6}, counts(lat))
	for k, h := range lat {
		require.Greater(t, h.sum, 0.0, k)
		require.Less(t, h.sum, 60.0, "%s: seconds", k)
	}
	require.Equal(t, "s", got["windowstore.operation.duration"].Unit)

	// Script calls. The writes: the 20 Adds, the 2 Allows sent, the Add
	// to a string, in one call or more; a call that carried the string's
	// Add failed as a whole or not, depending on the backend's script, so
	// the count is checked by script.
	calls := got.sums(t, "windowstore.script.calls")
	t.Logf("script calls: %v", calls)
	batch := histOf[int64](t, got, "windowstore.script.batch_size")
	writeCalls := calls["outcome=ok,script=write"] + calls["outcome=error,script=write"]
	require.EqualValues(t, batch["script=write"].count, writeCalls, "%v", calls)
	require.EqualValues(t, 23, batch["script=write"].sum, "operations carried by write calls")
	require.GreaterOrEqual(t, writeCalls, int64(3), "the Allows and the string's Add go alone")
	require.LessOrEqual(t, writeCalls, int64(23))
	// The reads: 3 Sums of one key, a SumMany of 4 in one call, and the Sum
	// past its deadline, alone in its call, which the client fails at once.
	require.EqualValues(t, 4, calls["outcome=ok,script=sum"], "%v", calls)
	require.EqualValues(t, 1, calls["outcome=deadline_exceeded,script=sum"], "%v", calls)
	require.Equal(t, hist{5, 8}, batch["script=sum"])
	// The limiter's script: one call per decision sent.
	require.EqualValues(t, 2, calls["outcome=ok,script=log"], "%v", calls)
	require.Equal(t, hist{2, 2}, batch["script=log"])
	require.Equal(t, counts(batch), counts(histOf[float64](t, got, "windowstore.script.duration")))
	for k := range calls {
		require.Regexp(t, `^outcome=(ok|error),script=(write|sum|log)$|^outcome=deadline_exceeded,script=sum$`, k)
	}

	// Spans: one per operation, children of the parent, named by op.
	ended := spans.Ended()
	byName := map[string]int{}
	errs := map[string]int{}
	for _, sp := range ended {
		if sp.Name() == "request" {
			continue
		}
		byName[sp.Name()]++
		require.Equal(t, parent.SpanContext().TraceID(), sp.SpanContext().TraceID(), sp.Name())
		require.Equal(t, parent.SpanContext().SpanID(), sp.Parent().SpanID(), sp.Name())
		a := attribute.NewSet(sp.Attributes()...)
		op, _ := a.Value(wsotel.SpanKeyOp)
		require.Equal(t, "windowstore."+op.AsString(), sp.Name())
		outcome, _ := a.Value(wsotel.SpanKeyOutcome)
		if outcome.AsString() == "ok" {
			require.Equal(t, codes.Unset, sp.Status().Code, sp.Name())
			continue
		}
		require.Equal(t, codes.Error, sp.Status().Code, sp.Name())
		require.NotEmpty(t, sp.Status().Description)
		require.Len(t, sp.Events(), 1)
		require.Equal(t, "exception", sp.Events()[0].Name)
		errs[sp.Name()+" "+outcome.AsString()]++
	}
	require.Equal(t, map[string]int{"windowstore.add": 21, "windowstore.sum": 4, "windowstore.sum many": 1, "windowstore.allow": 6}, byName)
	require.Equal(t, map[string]int{
		"windowstore.add wrong_type": 1, "windowstore.sum deadline_exceeded": 1, "windowstore.allow invalid": 2,
	}, errs)
	require.Equal(t, trace.SpanKindInternal, ended[0].SpanKind())
}

func counts(m map[string]hist) map[string]uint64 {
	out := map[string]uint64{}
	for k, h := range m {
		out[k] = h.count
	}
	return out
}

// TestOTelMiddleware: the middleware's decisions through a real HTTP flow on
// a real server, recorded by the OpenTelemetry Recorder as metrics/prom
// records them: allowed, refused, and the would-be refusals of a shadow rule.
func TestOTelMiddleware(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	prefix := harness.Prefix(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec, err := wsotel.NewRecorder(wsotel.WithMeterProvider(mp), wsotel.WithPrefix("t"))
	require.NoError(t, err)
	obs, err := wsotel.NewObserver(wsotel.WithMeterProvider(mp), wsotel.WithPrefix("t"))
	require.NoError(t, err)
	tight, err := limit.NewGCRA(c, "tight", 1, time.Hour, 3, limit.WithPrefix(prefix), limit.WithObserver(obs))
	require.NoError(t, err)
	perKey, err := limit.NewLog(c, "perkey", 6, time.Minute, limit.WithPrefix(prefix), limit.WithObserver(obs))
	require.NoError(t, err)
	mw, err := httplimit.New([]httplimit.Rule{
		{Name: "preview", Key: httplimit.Header("X-API-Key"), Limiters: []limit.Limiter{tight}, Shadow: true},
		{Name: "api", Key: httplimit.Header("X-API-Key"), Limiters: []limit.Limiter{perKey}},
	}, httplimit.WithRecorder(rec))
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	statuses := map[int]int{}
	for range 10 {
		statuses[get(t, ts.URL, map[string]string{"X-API-Key": "k"}).StatusCode]++
	}
	// No key: the enforced rule answers 400, the shadow rule records it too.
	statuses[get(t, ts.URL, nil).StatusCode]++
	require.Equal(t, map[int]int{http.StatusOK: 6, http.StatusTooManyRequests: 4, http.StatusBadRequest: 1}, statuses)

	got := collectOTel(t, reader)
	require.Equal(t, map[string]int64{
		"outcome=allowed,rule=preview":        3,
		"outcome=shadow_refused,rule=preview": 7,
		"outcome=bad_request,rule=preview":    1,
		"outcome=allowed,rule=api":            6,
		"outcome=refused,rule=api":            4,
		"outcome=bad_request,rule=api":        1,
	}, got.sums(t, "t.ratelimit.decisions"))
	require.Equal(t, "{decision}", got["t.ratelimit.decisions"].Unit)
	lat := histOf[float64](t, got, "t.ratelimit.decision")
	require.Equal(t, map[string]uint64{"rule=preview": 11, "rule=api": 11}, counts(lat))
	require.Equal(t, "s", got["t.ratelimit.decision"].Unit)
	// The limiters' own operations, on the same provider: 10 decisions each,
	// of which the repeated refusals (6 of the GCRA's, 3 of the log's) came
	// from the limiters' refusal caches, with no script call.
	require.Equal(t, map[string]int64{"op=allow,outcome=ok": 20}, got.sums(t, "t.windowstore.operations"))
	require.Equal(t, map[string]int64{"outcome=ok,script=gcra": 4, "outcome=ok,script=log": 7},
		got.sums(t, "t.windowstore.script.calls"))
}

// TestOTelDegraded: a degraded limiter behind the middleware, its server
// killed: the Recorder counts degraded_allowed decisions and its breaker
// gauge goes from closed to open; the Observer sees the limiter's calls
// fail until the breaker keeps them off the dead server.
func TestOTelDegraded(t *testing.T) {
	srv := harness.Fresh(t, harness.Redis70)
	harness.Use(t, harness.AreaFaults)
	c := srv.Client(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec, err := wsotel.NewRecorder(wsotel.WithMeterProvider(mp))
	require.NoError(t, err)
	obs, err := wsotel.NewObserver(wsotel.WithMeterProvider(mp))
	require.NoError(t, err)
	lg, err := limit.NewLog(c, "perkey", 100, time.Minute, limit.WithObserver(obs))
	require.NoError(t, err)
	d, err := limit.Degrade(lg, limit.WithFailures(3), limit.WithCooldown(time.Hour))
	require.NoError(t, err)
	rec.WatchBreaker("perkey", d)
	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-API-Key"), Limiters: []limit.Limiter{d}}},
		httplimit.WithRecorder(rec))
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	breaker := func() map[string]int64 {
		m := collectOTel(t, reader)["ratelimit.breaker_state"]
		g, ok := m.Data.(metricdata.Gauge[int64])
		require.True(t, ok, "%T", m.Data)
		out := map[string]int64{}
		for _, p := range g.DataPoints {
			out[attrKey(p.Attributes)] = p.Value
		}
		return out
	}

	for range 2 {
		require.Equal(t, http.StatusOK, get(t, ts.URL, map[string]string{"X-API-Key": "k"}).StatusCode)
	}
	require.Equal(t, map[string]int64{"limiter=perkey": 0}, breaker(), "0: closed")

	srv.Kill(t)
	for range 5 {
		require.Equal(t, http.StatusOK, get(t, ts.URL, map[string]string{"X-API-Key": "k"}).StatusCode)
	}
	require.Equal(t, map[string]int64{"limiter=perkey": 2}, breaker(), "2: open")
	got := collectOTel(t, reader)
	require.Equal(t, map[string]int64{"outcome=allowed,rule=api": 2, "outcome=degraded_allowed,rule=api": 5},
		got.sums(t, "ratelimit.decisions"))
	// The 3 failures that opened the breaker reached the limiter; the 2
	// calls after did not.
	require.Equal(t, map[string]int64{"op=allow,outcome=ok": 2, "op=allow,outcome=error": 3},
		got.sums(t, "windowstore.operations"))
	require.Equal(t, map[string]int64{"outcome=ok,script=log": 2, "outcome=error,script=log": 3},
		got.sums(t, "windowstore.script.calls"))
}

// opLog records the operations and script calls (their numbers of
// operations) an observer is told of.
type opLog struct {
	mu    sync.Mutex
	ops   []string
	calls []int
}

// TestObserverOncePerCall: the observer hears of each call the caller makes
// once, under its own name, whatever path it takes inside (a tiered Add or
// Allow, an event, a distinct count, AllowAll, Apply).
func TestObserverOncePerCall(t *testing.T) {
	log := &opLog{}
	w := store.Window{Length: time.Minute, Bucket: time.Second}
	s, _ := newStore(t, targets[0], w, store.WithObserver(log), store.WithTiers(store.Window{Length: time.Hour, Bucket: time.Minute}))
	ctx := ctxT(t)
	for _, c := range []struct {
		want string
		call func() error
	}{
		{"add", func() error { _, err := s.Add(ctx, "k", 1); return err }},
		{"add", func() error { _, err := s.Record(ctx, store.Event{Key: "k", Delta: 1, NoSum: true}); return err }},
		{"add", func() error { _, err := s.Record(ctx, store.Event{Key: "k", Delta: 1, ID: "e"}); return err }},
		{"allow", func() error { _, err := s.Allow(ctx, "k", 100, 1); return err }},
		{"allow", func() error {
			_, err := s.Record(ctx, store.Event{Key: "k", Delta: 1, ID: "f", Limit: 100})
			return err
		}},
		{"allow", func() error {
			_, err := store.AllowAll(ctx, 1, store.Quota{Store: s, Key: "k", Limit: 100}, store.Quota{Store: s.Over(time.Hour), Key: "k", Limit: 100})
			return err
		}},
		{"apply", func() error {
			_, err := store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: s, Key: "k", Delta: 1}}})
			return err
		}},
		{"record stat", func() error { _, err := addDistinct(ctx, s, "d", "m"); return err }},
		{"read stat", func() error { _, err := countDistinct(ctx, s, "d"); return err }},
		{"sum", func() error { _, err := s.Sum(ctx, "k"); return err }},
	} {
		require.NoError(t, c.call())
		require.Equal(t, []string{c.want}, log.take())
	}
}

func (o *opLog) Start(ctx context.Context, op string) (context.Context, func(error)) {
	o.mu.Lock()
	o.ops = append(o.ops, op)
	o.mu.Unlock()
	return ctx, func(error) {}
}

func (o *opLog) Call(_ string, ops int, _ time.Duration, _ error) {
	o.mu.Lock()
	o.calls = append(o.calls, ops)
	o.mu.Unlock()
}

// takeCalls returns the script calls since the last take.
func (o *opLog) takeCalls() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.calls
	o.calls = nil
	return out
}

func (o *opLog) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.ops
	o.ops = nil
	return out
}
