package limit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/internal/refusal"
	"github.com/windowstore/windowstore/store"
)

// ErrServerDown reports a server that a Degraded limiter cannot reach and
// cannot stand in for: its breaker is open (Degraded.Health) or its
// in-process limiter is full.
var ErrServerDown = errors.New("limit: server down")

// breakerState is the state of a Degraded limiter's circuit breaker.
type breakerState int

// The breaker's states, in increasing order of trouble (the metrics/prom
// gauge reports these numbers).
const (
	// breakerClosed: calls go to the server. The zero value.
	breakerClosed breakerState = 0
	// breakerHalfOpen: the cool-down is over; one call, the probe, goes to
	// the server, the others are decided in process.
	breakerHalfOpen breakerState = 1
	// breakerOpen: the server failed; calls are decided in process, without
	// calling it, until the cool-down ends.
	breakerOpen breakerState = 2
)

func (s breakerState) String() string {
	switch s {
	case breakerClosed:
		return "closed"
	case breakerHalfOpen:
		return "half-open"
	case breakerOpen:
		return "open"
	}
	return "breakerState(" + strconv.Itoa(int(s)) + ")"
}

type degradeOptions struct {
	instances int
	failures  int
	cooldown  time.Duration
	keys      int
	now       func() time.Time
	onChange  func(from, to string)
}

// WithInstances sets how many instances share the limit (default 1): while
// degraded, each instance admits at most limit / n (rounded down: 10 / 3 is
// 3, and 3 / 4 is 0, nothing) per window, so that n instances that all
// decide in process for a whole window admit no more than the limit in it.
// A window that spans an outage holds more: see Degraded.
func WithInstances(n int) Option { return func(o *options) { o.deg.instances, o.degrade = n, true } }

// WithFailures sets how many consecutive transient failures open the breaker
// (default 3).
func WithFailures(k int) Option { return func(o *options) { o.deg.failures, o.degrade = k, true } }

// WithCooldown sets how long an open breaker keeps calls off the server
// before one probe (default 1 s).
func WithCooldown(d time.Duration) Option {
	return func(o *options) { o.deg.cooldown, o.degrade = d, true }
}

// WithLocalKeys sets how many keys the in-process limiter holds (default
// 100,000). When it is full of keys with live events, a call for a new key
// fails with ErrServerDown (and the server's error, if there was a call).
func WithLocalKeys(n int) Option { return func(o *options) { o.deg.keys, o.degrade = n, true } }

// withBreakerClock sets the clock of the breaker and of Allow's in-process
// decisions, for this package's tests; it is time.Now otherwise.
func withBreakerClock(now func() time.Time) Option {
	return func(o *options) { o.deg.now, o.degrade = now, true }
}

// WithOnStateChange has every change of the breaker's state told to fn,
// after the change, on the goroutine of the call that made it.
func WithOnStateChange(fn func(from, to string)) Option {
	return func(o *options) { o.deg.onChange, o.degrade = fn, true }
}

// Degraded is a limiter that stands in for its server while the server
// fails. Its calls go to the limiter it wraps; when one fails transiently (a
// network error, a timeout, or a server that is loading, busy or without a
// master), the call is decided in process instead, on an exact sliding log
// in memory sized at limit / N per window (N from WithInstances), with
// Decision.Degraded true and no error. Errors that are no sign of a down
// server (store.ErrInvalid, a server's error reply such as NOPERM or OOM, the
// caller's cancellation) are returned as they are.
//
// A circuit breaker spares a dead server a call per request: after K
// consecutive transient failures (WithFailures) it opens, and every call is
// decided in process for the cool-down (WithCooldown); then it is half-open:
// one call, the probe, goes to the server while the others are still decided
// in process. The probe's success closes the breaker, and the calls after it
// go to the server; its failure opens the breaker for another cool-down.
//
// What is admitted in process is not counted on the server, and the server's
// counts are not seen in process: after a failure an instance starts its
// share afresh. The in-process log is kept across recoveries, so an instance
// that flaps admits at most its share per window in process. So N instances
// admit at most the limit L together only in a window that they spend all
// in process (N x (L / N) <= L). In a window that spans an outage they admit
// what the server admits in that window plus at most N x (L / N) in
// process: at most L + N x (L / N) <= 2L when the server admits at most L
// per window and keeps its counts through the outage, and L more for each
// restart that loses them (a server without persistence counts afresh).
//
// Create one with Degrade. A Degraded limiter is safe for concurrent use if
// the limiter it wraps is.
type Degraded struct {
	l       Limiter
	shadow  bool
	o       degradeOptions
	mem     *memLog
	policy  Policy
	parts   []Policy
	breaker breaker
}

// Degrade returns l with an in-process stand-in and a circuit breaker (see
// Degraded). l may be any limiter: a combination (Combine) falls back on every one
// of its policies, all or nothing; a GCRA on rate / N per period (its burst
// plays no part); a shadow limiter (Shadow) keeps watching without
// enforcing. It fails with store.ErrInvalid for a nil l or an option out of range.
func Degrade(l Limiter, opts ...Option) (*Degraded, error) {
	if l == nil {
		return nil, newError("degrade", store.ErrInvalid, "nil limiter")
	}
	all := options{deg: degradeOptions{instances: 1, failures: 3, cooldown: time.Second, keys: 100000, now: time.Now}}
	for _, opt := range opts {
		opt(&all)
	}
	o := all.deg
	name := l.Policy().Name
	if all.limiter {
		return nil, newError(name, store.ErrInvalid, "WithPrefix and WithObserver configure a limiter, not Degrade")
	}
	switch {
	case o.instances < 1:
		return nil, newError(name, store.ErrInvalid, "instances "+strconv.Itoa(o.instances)+" is less than 1")
	case o.failures < 1:
		return nil, newError(name, store.ErrInvalid, "failures "+strconv.Itoa(o.failures)+" is less than 1")
	case o.cooldown <= 0:
		return nil, newError(name, store.ErrInvalid, "cool-down "+o.cooldown.String()+" is not positive")
	case o.keys < 1:
		return nil, newError(name, store.ErrInvalid, "local keys "+strconv.Itoa(o.keys)+" is less than 1")
	case o.now == nil:
		return nil, newError(name, store.ErrInvalid, "nil clock")
	}
	d := &Degraded{l: l, o: o, policy: l.Policy(), parts: Policies(l)}
	_, d.shadow = l.(shadow)
	mp := make([]memPolicy, len(d.parts))
	for i, p := range d.parts {
		mp[i] = memPolicy{name: p.Name, limit: p.Limit / int64(o.instances), window: p.Window.Milliseconds()}
	}
	d.mem = newMemLog(mp, o.keys)
	return d, nil
}

// Policies returns every policy of l: a combination's (Combine), in order,
// or those of the combination a Degraded wraps; else l's one. A server's RateLimit-Policy header,
// as httplimit sets it, lists them.
func Policies(l Limiter) []Policy {
	if m, ok := l.(interface{ policies() []Policy }); ok {
		return m.policies()
	}
	return []Policy{l.Policy()}
}

// policies returns the wrapped limiter's policies: several for a combination.
func (d *Degraded) policies() []Policy { return append([]Policy(nil), d.parts...) }

// Policy returns the wrapped limiter's policy.
func (d *Degraded) Policy() Policy { return d.policy }

// Allow asks the server, or decides in process while it fails (see Degraded).
func (d *Degraded) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	return d.allow(ctx, nil, key, n)
}

// AllowAt is Allow at instant t on the client's clock; in process, too, the
// decision is at t.
func (d *Degraded) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	return d.allow(ctx, &t, key, n)
}

func (d *Degraded) allow(ctx context.Context, at *time.Time, key string, n int64) (store.Decision, error) {
	call, probe := d.breaker.enter(d)
	if !call {
		return d.local(at, key, n, nil)
	}
	var dec store.Decision
	var err error
	var cached bool // answered from the limiter's refusal cache: no verdict on the server
	if at != nil {
		dec, err = d.l.AllowAt(ctx, *at, key, n)
	} else {
		dec, err = d.l.Allow(refusal.Report(ctx, &cached), key, n)
	}
	switch f := backend.Classify(err); {
	case err == nil && cached:
		d.breaker.release(probe)
		return dec, nil
	case err == nil || f == backend.Answered:
		d.breaker.succeed(d, probe)
		return dec, err
	case f.Down() && !errors.Is(err, store.ErrInvalid):
		d.breaker.fail(d, probe, err)
		return d.local(at, key, n, err)
	default: // no verdict on the server: bad input, or the caller gave up
		d.breaker.release(probe)
		return dec, err
	}
}

// local decides in process. cause is the server's error, if it was called.
func (d *Degraded) local(at *time.Time, key string, n int64, cause error) (store.Decision, error) {
	if err := keyspace.Check(key); err != nil {
		return store.Decision{}, callError(d.policy.Name, key, store.ErrInvalid, reason(err), err)
	}
	if err := checkCost(d.policy.Name, key, n, maxExact); err != nil {
		return store.Decision{}, err
	}
	now := d.o.now()
	if at != nil {
		now = *at
	}
	dec, ok := d.mem.allow(now, key, n)
	if !ok {
		detail := "the in-process limiter holds " + strconv.Itoa(d.o.keys) + " keys"
		if cause != nil {
			detail += "; the server's error: " + cause.Error()
		}
		return store.Decision{}, callError(d.policy.Name, key, ErrServerDown, detail, cause)
	}
	dec.Degraded = true
	for i := range dec.Policies {
		dec.Policies[i].Degraded = true
	}
	if d.shadow {
		dec = watch(dec)
	}
	return dec, nil
}

// State returns the circuit breaker's state now: "closed" (calls go to the
// server), "open" (the server failed; calls are decided in process until the
// cool-down ends) or "half-open" (the cool-down is over: the next call, the
// probe, goes to the server while the others are still decided in process).
func (d *Degraded) State() string {
	return d.state().String()
}

func (d *Degraded) state() breakerState {
	b := &d.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerOpen && !d.o.now().Before(b.until) {
		return breakerHalfOpen
	}
	return b.state
}

// Health returns nil while the breaker is closed; else an error that wraps
// ErrServerDown and the server's last error:
//
//	limit: perminute: server down: breaker open after 3 consecutive failures; the last: dial tcp 127.0.0.1:6379: connect: connection refused
func (d *Degraded) Health() error {
	st := d.state()
	if st == breakerClosed {
		return nil
	}
	b := &d.breaker
	b.mu.Lock()
	last, fails := b.last, b.fails
	b.mu.Unlock()
	detail := "breaker " + st.String() + " after " + strconv.Itoa(fails) + " consecutive failures"
	if last != nil {
		detail += "; the last: " + last.Error()
	}
	return &store.Error{Package: "limit", Op: d.policy.Name, Kind: ErrServerDown, Detail: detail, Err: last}
}

// breaker is the circuit breaker's state machine.
type breaker struct {
	mu      sync.Mutex
	state   breakerState // closed or open; half-open is open past until
	fails   int          // consecutive transient failures
	until   time.Time    // open: the end of the cool-down
	probing bool         // half-open: the probe is out
	last    error        // the last transient failure
}

// enter tells whether a call goes to the server, and whether it is the probe.
func (b *breaker) enter(d *Degraded) (call, probe bool) {
	b.mu.Lock()
	if b.state == breakerClosed {
		b.mu.Unlock()
		return true, false
	}
	if b.probing || d.o.now().Before(b.until) {
		b.mu.Unlock()
		return false, false
	}
	b.probing = true
	b.mu.Unlock()
	d.changed(breakerOpen, breakerHalfOpen)
	return true, true
}

// succeed records a call that the server answered.
func (b *breaker) succeed(d *Degraded, probe bool) {
	b.mu.Lock()
	from := b.state
	if from == breakerOpen && !probe {
		// A call let through before the breaker opened, answered late: the
		// probe decides.
		b.mu.Unlock()
		return
	}
	b.state, b.fails, b.probing, b.last = breakerClosed, 0, false, nil
	b.mu.Unlock()
	if probe {
		d.changed(breakerHalfOpen, breakerClosed)
	}
}

// fail records a transient failure.
func (b *breaker) fail(d *Degraded, probe bool, err error) {
	b.mu.Lock()
	b.fails++
	b.last = err
	switch {
	case probe:
		b.probing = false
		b.until = d.o.now().Add(d.o.cooldown)
		b.mu.Unlock()
		d.changed(breakerHalfOpen, breakerOpen)
	case b.state == breakerClosed && b.fails >= d.o.failures:
		b.state = breakerOpen
		b.until = d.o.now().Add(d.o.cooldown)
		b.mu.Unlock()
		d.changed(breakerClosed, breakerOpen)
	default:
		b.mu.Unlock()
	}
}

// release ends a call without a verdict on the server: a probe's turn goes
// to the next call.
func (b *breaker) release(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}

func (d *Degraded) changed(from, to breakerState) {
	if d.o.onChange != nil {
		d.o.onChange(from.String(), to.String())
	}
}
