// Package otel instruments windowstore with OpenTelemetry: metrics and,
// optionally, spans for the operations of stores and limiters, and metrics
// for the HTTP middleware's decisions. It is a module of its own so that the
// core stays free of the OpenTelemetry API.
//
//	obs, err := otel.NewObserver(otel.WithMeterProvider(mp), otel.WithTracerProvider(tp))
//	s, err := store.New(ctx, client, window, store.WithObserver(obs))
//	l, err := limit.NewGCRA(client, "perip", 10, time.Second, 20, limit.WithObserver(obs))
//
//	rec, err := otel.NewRecorder(otel.WithMeterProvider(mp))
//	mw, err := httplimit.New(rules, httplimit.WithRecorder(rec))
//
// The package is named otel, as its directory; a program that also imports
// go.opentelemetry.io/otel names one of them, say wsotel.
//
// # Observer metrics
//
// An Observer (a store.Observer, for store.WithObserver and
// limit.WithObserver) records:
//
//	windowstore.operations           counter          {op, outcome}  operations ended
//	windowstore.operation.duration   histogram (s)    {op}           an operation's time, from its start to its end
//	windowstore.operations.active    up-down counter  {op}           operations started and not yet ended
//	windowstore.script.calls         counter          {script, outcome}  script calls sent, counted after their reply
//	windowstore.script.duration      histogram (s)    {script}       a script call's round trip
//	windowstore.script.batch_size    histogram        {script}       operations per script call
//
// op is the operation's name ("add", "sum", "sum many", "allow", "apply",
// "inspect", "record stat", "read stat"); script is the script's
// ("write", "sum", and a limiter's "log", "fixed-window" or "gcra"). Several
// operations can share one script call, as coalesced writes do, so the
// batch size says how well writes coalesce, and operations.active is what
// is in flight: the store tells of a script call only after its reply, so
// in-flight work is counted by operation, from Start to its end. An
// operation's time includes its wait for a batch, its retries and its
// script calls.
//
// outcome is "ok", or the error's kind, found with errors.Is:
//
//	invalid           store.ErrInvalid: bad input to any package, nothing sent
//	wrong_type        store.ErrWrongType
//	overflow          store.ErrOverflow
//	unavailable       store.ErrUnavailable, limit.ErrServerDown (a degraded limiter's server)
//	out_of_memory     store.ErrOutOfMemory
//	no_permission     store.ErrNoPermission
//	clock             store.ErrClock
//	too_old           store.ErrTooOld
//	future            store.ErrFuture
//	deadline_exceeded context.DeadlineExceeded
//	canceled          context.Canceled
//	error             anything else (a connection error, a server error)
//
// A script call's error is the raw reply, before the store gives it a kind:
// its outcome is "ok", "deadline_exceeded", "canceled" or, mostly, "error".
//
// With WithTracerProvider, every operation is also a span, named
// "windowstore." + op (such as "windowstore.add"), with the attributes
// windowstore.op and windowstore.outcome; a failed operation's span records
// the error and has status Error. The context the store carries on holds the
// span, so spans of the Redis client (if it makes any) are its children.
//
// # Recorder metrics
//
// A Recorder (an httplimit.Recorder) records what the metrics/prom module
// records, with the same labels:
//
//	ratelimit.decisions      counter        {rule, outcome}  outcome: allowed, refused, local_shed, failed_open, failed_closed, bad_request, shadow_refused, degraded_allowed, degraded_refused
//	ratelimit.decision       histogram (s)  {rule}           time spent deciding
//	ratelimit.breaker_state  gauge          {limiter}        0 closed, 1 half-open, 2 open (WatchBreaker)
//
// Through the OpenTelemetry Prometheus exporter, these come out as
// ratelimit_decisions_total, ratelimit_decision_seconds and
// ratelimit_breaker_state: the names metrics/prom gives, so dashboards carry
// over. Refusals are outcome "refused" plus "local_shed"; errors are
// "failed_open" plus "failed_closed"; would-be refusals admitted because a
// shadow rule or a shadow limiter only watches are "shadow_refused";
// decisions made in process while a degraded limiter's server fails
// (limit.Degrade) are "degraded_allowed" and "degraded_refused". The
// breaker gauge is observed at each collection, once WatchBreaker names it.
//
// WithPrefix puts a prefix before every instrument name, as metrics/prom's
// namespace does: WithPrefix("myapi") gives myapi.ratelimit.decisions and
// myapi.windowstore.operations.
package otel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// ScopeName is the instrumentation scope of the meters and tracers the
// package asks for.
const ScopeName = "github.com/windowstore/windowstore/metrics/otel"

// Attribute keys.
const (
	KeyOp      = attribute.Key("op")      // the operation, on the operation metrics
	KeyScript  = attribute.Key("script")  // the script, on the script metrics
	KeyOutcome = attribute.Key("outcome") // "ok" or the error's kind; the decision's outcome
	KeyRule    = attribute.Key("rule")    // the middleware's rule
	KeyLimiter = attribute.Key("limiter") // the limiter a breaker gauge is of (WatchBreaker)

	SpanKeyOp      = attribute.Key("windowstore.op")      // the operation, on a span
	SpanKeyOutcome = attribute.Key("windowstore.outcome") // "ok" or the error's kind, on a span
)

// Latency buckets, in seconds: those of metrics/prom.
var secondsBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// Batch size buckets: the operations of one script call.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// An Option configures an Observer or a Recorder.
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	prefix  string
}

// WithMeterProvider sets where the instruments come from. The default is the
// global provider (go.opentelemetry.io/otel.GetMeterProvider) at the time
// NewObserver or NewRecorder runs.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meters = mp }
}

// WithTracerProvider has an Observer open a span for every operation. Without
// it there are no spans. A Recorder ignores it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracers = tp }
}

// WithPrefix puts p and a dot before every instrument name: WithPrefix("myapi")
// gives myapi.windowstore.operations. The default is no prefix.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

func newConfig(opts []Option) (config, metric.Meter) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.meters == nil {
		c.meters = otelapi.GetMeterProvider()
	}
	return c, c.meters.Meter(ScopeName)
}

func (c config) name(n string) string {
	if c.prefix == "" {
		return n
	}
	return c.prefix + "." + n
}

// pair is the key of a cached attribute set.
type pair struct{ a, b string }

// attrCache holds the measurement options of the attribute sets seen so far,
// so that recording allocates nothing after the first time.
type attrCache struct {
	m sync.Map // pair -> metric.MeasurementOption
}

func (c *attrCache) get(p pair, build func() attribute.Set) metric.MeasurementOption {
	if v, ok := c.m.Load(p); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := c.m.LoadOrStore(p, metric.WithAttributeSet(build()))
	return v.(metric.MeasurementOption)
}

// Observer is a store.Observer that records OpenTelemetry metrics and,
// with WithTracerProvider, spans. One Observer can serve any number of
// stores and limiters; it is safe for concurrent use. Its zero value is not
// usable: create one with NewObserver.
type Observer struct {
	ops      metric.Int64Counter
	opTime   metric.Float64Histogram
	active   metric.Int64UpDownCounter
	calls    metric.Int64Counter
	callTime metric.Float64Histogram
	batch    metric.Int64Histogram
	tracer   trace.Tracer // nil: no spans

	opAttrs     attrCache // {op, outcome} and {op, ""}
	scriptAttrs attrCache // {script, outcome} and {script, ""}
}

var _ store.Observer = (*Observer)(nil)

// NewObserver creates an Observer's instruments.
func NewObserver(opts ...Option) (*Observer, error) {
	c, m := newConfig(opts)
	o := &Observer{}
	var errs []error
	var err error
	o.ops, err = m.Int64Counter(c.name("windowstore.operations"),
		metric.WithDescription("Operations of windowstore stores and limiters, by operation and outcome."),
		metric.WithUnit("{operation}"))
	errs = append(errs, err)
	o.opTime, err = m.Float64Histogram(c.name("windowstore.operation.duration"),
		metric.WithDescription("Time from an operation's start to its end, including its wait for a batch, retries and script calls."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	errs = append(errs, err)
	o.active, err = m.Int64UpDownCounter(c.name("windowstore.operations.active"),
		metric.WithDescription("Operations started and not yet ended."),
		metric.WithUnit("{operation}"))
	errs = append(errs, err)
	o.calls, err = m.Int64Counter(c.name("windowstore.script.calls"),
		metric.WithDescription("Script calls sent to the server, by script and outcome, counted after their reply."),
		metric.WithUnit("{call}"))
	errs = append(errs, err)
	o.callTime, err = m.Float64Histogram(c.name("windowstore.script.duration"),
		metric.WithDescription("Round trip of a script call."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	errs = append(errs, err)
	o.batch, err = m.Int64Histogram(c.name("windowstore.script.batch_size"),
		metric.WithDescription("Operations carried by one script call (coalesced writes, or the keys of a sum of many)."),
		metric.WithUnit("{operation}"), metric.WithExplicitBucketBoundaries(batchBuckets...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otel: create instruments: %w", err)
	}
	if c.tracers != nil {
		o.tracer = c.tracers.Tracer(ScopeName)
	}
	return o, nil
}

func (o *Observer) opAttr(op, outcome string) metric.MeasurementOption {
	return o.opAttrs.get(pair{op, outcome}, func() attribute.Set {
		if outcome == "" {
			return attribute.NewSet(KeyOp.String(op))
		}
		return attribute.NewSet(KeyOp.String(op), KeyOutcome.String(outcome))
	})
}

func (o *Observer) scriptAttr(script, outcome string) metric.MeasurementOption {
	return o.scriptAttrs.get(pair{script, outcome}, func() attribute.Set {
		if outcome == "" {
			return attribute.NewSet(KeyScript.String(script))
		}
		return attribute.NewSet(KeyScript.String(script), KeyOutcome.String(outcome))
	})
}

// Start counts the operation as active and, with a tracer, opens its span.
// The function it returns ends both, and records the operation's outcome and
// time; calling it more than once records once.
func (o *Observer) Start(ctx context.Context, op string) (context.Context, func(err error)) {
	begin := time.Now()
	byOp := o.opAttr(op, "")
	o.active.Add(ctx, 1, byOp)
	var span trace.Span
	if o.tracer != nil {
		ctx, span = o.tracer.Start(ctx, "windowstore."+op,
			trace.WithAttributes(SpanKeyOp.String(op)), trace.WithTimestamp(begin))
	}
	var once sync.Once
	return ctx, func(err error) {
		once.Do(func() {
			d := time.Since(begin)
			kind := Outcome(err)
			// The measurements go with a context of their own: the caller's
			// may be canceled by now, and the span has ended below.
			bg := context.Background()
			o.active.Add(bg, -1, byOp)
			o.ops.Add(bg, 1, o.opAttr(op, kind))
			o.opTime.Record(bg, d.Seconds(), byOp)
			if span != nil {
				span.SetAttributes(SpanKeyOutcome.String(kind))
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				}
				span.End()
			}
		})
	}
}

// Call records one script call: its outcome, round trip and batch size.
func (o *Observer) Call(script string, ops int, d time.Duration, err error) {
	ctx := context.Background()
	byScript := o.scriptAttr(script, "")
	o.calls.Add(ctx, 1, o.scriptAttr(script, Outcome(err)))
	o.callTime.Record(ctx, d.Seconds(), byScript)
	o.batch.Record(ctx, int64(ops), byScript)
}

// kinds maps the sentinel errors to their outcome, in the order they are
// tried.
var kinds = []struct {
	err  error
	name string
}{
	{store.ErrInvalid, "invalid"},
	{store.ErrWrongType, "wrong_type"},
	{store.ErrOverflow, "overflow"},
	{store.ErrUnavailable, "unavailable"},
	{limit.ErrServerDown, "unavailable"},
	{store.ErrOutOfMemory, "out_of_memory"},
	{store.ErrNoPermission, "no_permission"},
	{store.ErrClock, "clock"},
	{store.ErrTooOld, "too_old"},
	{store.ErrFuture, "future"},
	{context.DeadlineExceeded, "deadline_exceeded"},
	{context.Canceled, "canceled"},
}

// Outcome is the outcome an Observer records for an operation's error: "ok"
// for nil, the error's kind (see the package documentation), or "error".
func Outcome(err error) string {
	if err == nil {
		return "ok"
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "error"
}

// Recorder is an httplimit.Recorder that records the middleware's decisions
// as OpenTelemetry metrics. It is safe for concurrent use. Its zero value is
// not usable: create one with NewRecorder.
type Recorder struct {
	decisions metric.Int64Counter
	latency   metric.Float64Histogram
	attrs     attrCache // {rule, outcome} and {rule, ""}

	mu       sync.Mutex
	breakers map[string]breaker // by limiter name, for the gauge
}

var _ httplimit.Recorder = (*Recorder)(nil)

// NewRecorder creates a Recorder's instruments. WithTracerProvider does not
// apply.
func NewRecorder(opts ...Option) (*Recorder, error) {
	c, m := newConfig(opts)
	r := &Recorder{breakers: map[string]breaker{}}
	var err1, err2, err3 error
	r.decisions, err1 = m.Int64Counter(c.name("ratelimit.decisions"),
		metric.WithDescription("Rate-limiting decisions, by rule and outcome."),
		metric.WithUnit("{decision}"))
	r.latency, err2 = m.Float64Histogram(c.name("ratelimit.decision"),
		metric.WithDescription("Time spent deciding, including the round trips to the server."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	_, err3 = m.Int64ObservableGauge(c.name("ratelimit.breaker_state"),
		metric.WithDescription("State of a degraded limiter's circuit breaker: 0 closed, 1 half-open, 2 open."),
		metric.WithInt64Callback(r.observeBreakers))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("otel: create instruments: %w", err)
	}
	return r, nil
}

// WatchBreaker has the gauge ratelimit.breaker_state{limiter=name} report
// d's circuit breaker state, read at each collection: 0 for "closed", 1 for
// "half-open", 2 for "open" (limit.Degraded.State). A second call with the
// same name replaces the first; a nil d stops watching name.
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if b == nil {
		delete(r.breakers, name)
		return
	}
	r.breakers[name] = b
}

// breakerValues are the gauge's values of the breaker's states.
var breakerValues = map[string]int64{"closed": 0, "half-open": 1, "open": 2}

func (r *Recorder) observeBreakers(_ context.Context, o metric.Int64Observer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, b := range r.breakers {
		if v, ok := breakerValues[b.State()]; ok {
			o.Observe(v, metric.WithAttributeSet(attribute.NewSet(KeyLimiter.String(name))))
		}
	}
	return nil
}

func (r *Recorder) attr(rule, outcome string) metric.MeasurementOption {
	return r.attrs.get(pair{rule, outcome}, func() attribute.Set {
		if outcome == "" {
			return attribute.NewSet(KeyRule.String(rule))
		}
		return attribute.NewSet(KeyRule.String(rule), KeyOutcome.String(outcome))
	})
}

// Observe records one decision.
func (r *Recorder) Observe(rule string, o httplimit.Outcome, d time.Duration) {
	ctx := context.Background()
	r.decisions.Add(ctx, 1, r.attr(rule, string(o)))
	r.latency.Record(ctx, d.Seconds(), r.attr(rule, ""))
}
