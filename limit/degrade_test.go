package limit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/resptest"
	"github.com/windowstore/windowstore/store"
)

// flaky is a Limiter stub that admits everything, or fails with err, on
// demand; it counts the calls that reach it. It stands for the server side,
// whose limiters are tested on real servers in the integration suite.
type flaky struct {
	p     Policy
	calls atomic.Int64
	mu    sync.Mutex
	err   error
	gate  chan struct{} // when set, calls wait for it
}

func (f *flaky) Policy() Policy { return f.p }
func (f *flaky) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	f.calls.Add(1)
	f.mu.Lock()
	err, gate := f.err, f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err != nil {
		return store.Decision{}, err
	}
	return store.Decision{Allowed: true, Limit: f.p.Limit, Remaining: f.p.Limit - n, Policy: f.p.Name}, nil
}
func (f *flaky) AllowAt(ctx context.Context, _ time.Time, key string, n int64) (store.Decision, error) {
	return f.Allow(ctx, key, n)
}
func (f *flaky) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

// refused is the error of a server that is down, as a limiter wraps it.
var refused = callError("p", "k", nil, "connection refused",
	&net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connect: connection refused"}})

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock               { return &clock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)} }
func policyOf(limit int64) Policy {
	return Policy{Name: "p", Limit: limit, Window: time.Second, Algorithm: "log"}
}
func allow1(t *testing.T, d *Degraded) store.Decision {
	t.Helper()
	dec, err := d.Allow(context.Background(), "k", 1)
	if err != nil {
		t.Fatalf("allow: %v", err)
	}
	return dec
}

// TestDegradeBreaker walks the breaker through its states on an injected
// clock: closed, failures answered in process, open (no call reaches the
// server), half-open with one probe that fails, then one that succeeds.
func TestDegradeBreaker(t *testing.T) {
	f := &flaky{p: policyOf(20)}
	clk := newClock()
	var changes []string
	d, err := Degrade(f, WithInstances(4), WithFailures(3), WithCooldown(time.Second), withBreakerClock(clk.now),
		WithOnStateChange(func(from, to string) { changes = append(changes, from+">"+to) }))
	if err != nil {
		t.Fatal(err)
	}
	if dec := allow1(t, d); dec.Degraded || !dec.Allowed || f.calls.Load() != 1 {
		t.Fatalf("healthy: %+v, %d calls", dec, f.calls.Load())
	}
	if d.State() != "closed" || d.Health() != nil {
		t.Fatalf("healthy: %v %v", d.State(), d.Health())
	}

	f.set(refused)
	for i := 1; i <= 3; i++ {
		dec := allow1(t, d)
		if !dec.Degraded || !dec.Allowed || dec.Limit != 5 || dec.Remaining != int64(5-i) {
			t.Fatalf("failure %d: %+v", i, dec)
		}
		if want := map[bool]string{false: "closed", true: "open"}[i == 3]; d.State() != want {
			t.Fatalf("after failure %d: %v, want %v", i, d.State(), want)
		}
	}
	if f.calls.Load() != 4 {
		t.Fatalf("%d calls, want 4", f.calls.Load())
	}
	h := d.Health()
	if !errors.Is(h, ErrServerDown) || !errors.Is(h, refused) {
		t.Fatalf("health: %v", h)
	}
	if want := "limit: p: server down: breaker open after 3 consecutive failures; the last: limit: p \"k\": connection refused"; h.Error() != want {
		t.Fatalf("health:\n got %s\nwant %s", h, want)
	}
	// Open: nothing reaches the server; the instance's share is 20 / 4 = 5.
	admitted := 0
	var last store.Decision
	for i := 0; i < 10; i++ {
		if last = allow1(t, d); last.Allowed {
			admitted++
		}
	}
	if admitted != 2 || f.calls.Load() != 4 || !last.Degraded || last.RetryAfter != time.Second {
		t.Fatalf("open: %d admitted, %d calls, last %+v", admitted, f.calls.Load(), last)
	}

	// The cool-down ends: half-open, one probe, which fails: open again.
	clk.add(time.Second)
	if d.State() != "half-open" {
		t.Fatalf("after the cool-down: %v", d.State())
	}
	if dec := allow1(t, d); !dec.Degraded || !dec.Allowed || f.calls.Load() != 5 {
		t.Fatalf("failed probe: %+v, %d calls", dec, f.calls.Load())
	}
	if d.State() != "open" {
		t.Fatalf("after a failed probe: %v", d.State())
	}
	allow1(t, d)
	if f.calls.Load() != 5 {
		t.Fatalf("a call reached the server while open: %d", f.calls.Load())
	}

	// Recovery: the probe waits at the gate; meanwhile the others are
	// decided in process, without a call. The probe's success closes the
	// breaker and the calls after it go to the server.
	clk.add(time.Second)
	f.set(nil)
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	probed := make(chan store.Decision)
	go func() { dec, _ := d.Allow(context.Background(), "k", 1); probed <- dec }()
	for f.calls.Load() != 6 {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		if dec := allow1(t, d); !dec.Degraded {
			t.Fatalf("a call during the probe was not decided in process: %+v", dec)
		}
	}
	if f.calls.Load() != 6 {
		t.Fatalf("%d calls during the probe, want only the probe", f.calls.Load()-5)
	}
	f.mu.Lock()
	f.gate = nil
	f.mu.Unlock()
	close(gate)
	if dec := <-probed; dec.Degraded || !dec.Allowed {
		t.Fatalf("probe: %+v", dec)
	}
	if d.State() != "closed" || d.Health() != nil {
		t.Fatalf("after the probe: %v %v", d.State(), d.Health())
	}
	for i := 0; i < 3; i++ {
		if dec := allow1(t, d); dec.Degraded {
			t.Fatalf("after recovery: %+v", dec)
		}
	}
	if f.calls.Load() != 9 {
		t.Fatalf("%d calls, want 9", f.calls.Load())
	}
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	if !slices.Equal(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
}

// TestDegradeErrors: only transient errors are decided in process; a
// server's error reply counts as a live server.
func TestDegradeErrors(t *testing.T) {
	scriptErr := func(code string) error {
		return callError("p", "k", nil, code, &backend.ScriptError{Code: code, Message: "x"})
	}
	tests := []struct {
		err      error
		degraded bool
	}{
		{refused, true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true},
		{callError("p", "k", nil, "eof", errors.New("x")), false},
		{scriptErr("LOADING"), true},
		{scriptErr("BUSY"), true},
		{scriptErr("NOPERM"), false},
		{scriptErr("OOM"), false},
		{callError("p", "k", store.ErrInvalid, "bad", nil), false},
		{context.Canceled, false},
		{fmt.Errorf("x: %w", syscall.ECONNRESET), true},
	}
	for _, tt := range tests {
		f := &flaky{p: policyOf(10)}
		f.set(tt.err)
		d, err := Degrade(f, WithFailures(1))
		if err != nil {
			t.Fatal(err)
		}
		dec, err := d.Allow(context.Background(), "k", 1)
		if tt.degraded && (err != nil || !dec.Degraded || !dec.Allowed) {
			t.Errorf("%v: want a degraded decision, got %+v, %v", tt.err, dec, err)
		}
		if !tt.degraded && (err != tt.err || dec.Degraded) {
			t.Errorf("%v: want the error as it is, got %+v, %v", tt.err, dec, err)
		}
		if want := map[bool]string{true: "open", false: "closed"}[tt.degraded]; d.State() != want {
			t.Errorf("%v: breaker %v, want %v", tt.err, d.State(), want)
		}
	}
	// In process, bad input is still refused.
	f := &flaky{p: policyOf(10)}
	f.set(refused)
	d, _ := Degrade(f, WithFailures(1))
	if _, err := d.Allow(context.Background(), "", 1); !errors.Is(err, store.ErrInvalid) || err.Error() != `limit: p: invalid argument: empty key` {
		t.Errorf("empty key: %v", err)
	}
	if _, err := d.Allow(context.Background(), "k", -1); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative cost: %v", err)
	}
	for _, tt := range []struct {
		opt  Option
		want string
	}{
		{WithInstances(0), "limit: p: invalid argument: instances 0 is less than 1"},
		{WithFailures(0), "limit: p: invalid argument: failures 0 is less than 1"},
		{WithCooldown(0), "limit: p: invalid argument: cool-down 0s is not positive"},
		{WithLocalKeys(0), "limit: p: invalid argument: local keys 0 is less than 1"},
		{withBreakerClock(nil), "limit: p: invalid argument: nil clock"},
		{WithPrefix("x:"), "limit: p: invalid argument: WithPrefix and WithObserver configure a limiter, not Degrade"},
	} {
		if _, err := Degrade(f, tt.opt); !errors.Is(err, store.ErrInvalid) || err.Error() != tt.want {
			t.Errorf("got %v, want %s", err, tt.want)
		}
	}
	if _, err := Degrade(nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("nil limiter: %v", err)
	}
	c, _ := resptest.Client(t, nil)
	if _, err := NewLog(c, "p", 5, time.Second, WithInstances(2)); !errors.Is(err, store.ErrInvalid) ||
		err.Error() != "limit: p: invalid argument: a Degrade option (WithInstances...) configures Degrade, not a limiter" {
		t.Errorf("a Degrade option to a limiter: %v", err)
	}
}

// TestDegradeLocalExact checks the in-process log against the exact sliding
// window: at most limit / N in any window, RetryAfter exact to the ms.
func TestDegradeLocalExact(t *testing.T) {
	f := &flaky{p: Policy{Name: "p", Limit: 30, Window: 10 * time.Second}}
	f.set(refused)
	clk := newClock()
	d, _ := Degrade(f, WithInstances(3), WithFailures(1), withBreakerClock(clk.now))
	ctx := context.Background()
	var admitted []time.Time
	for i := 0; i < 400; i++ {
		dec, err := d.Allow(ctx, "k", 1+int64(i%3))
		if err != nil {
			t.Fatal(err)
		}
		if dec.Allowed {
			for j := 0; j < 1+i%3; j++ {
				admitted = append(admitted, clk.now())
			}
		} else if dec.RetryAfter > 0 {
			// One ms before RetryAfter it is still refused; at it, admitted.
			if i%7 == 0 {
				clk.add(dec.RetryAfter - time.Millisecond)
				if again, _ := d.Allow(ctx, "k", 1+int64(i%3)); again.Allowed {
					t.Fatalf("admitted 1 ms before RetryAfter %v", dec.RetryAfter)
				}
				clk.add(time.Millisecond)
				if again, _ := d.Allow(ctx, "k", 1+int64(i%3)); !again.Allowed {
					t.Fatalf("refused at RetryAfter %v: %+v", dec.RetryAfter, again)
				}
				for j := 0; j < 1+i%3; j++ {
					admitted = append(admitted, clk.now())
				}
			}
		}
		clk.add(time.Duration(37*(i%11)) * time.Millisecond)
	}
	// Any 10 s span holds at most 10.
	for i := range admitted {
		n := 0
		for _, a := range admitted[i:] {
			if a.Sub(admitted[i]) < 10*time.Second {
				n++
			}
		}
		if n > 10 {
			t.Fatalf("%d admitted in the 10 s from %v", n, admitted[i])
		}
	}
	if len(admitted) < 50 {
		t.Fatalf("only %d admitted", len(admitted))
	}
	if dec, _ := d.Allow(ctx, "k", 11); dec.Allowed || dec.RetryAfter != -1 {
		t.Fatalf("a cost over the share: %+v", dec)
	}
}

// TestDegradeConcurrent: 40 goroutines on an open breaker admit exactly the
// instance's share.
func TestDegradeConcurrent(t *testing.T) {
	f := &flaky{p: policyOf(100)}
	f.set(refused)
	clk := newClock()
	d, _ := Degrade(f, WithInstances(4), WithFailures(1), withBreakerClock(clk.now))
	var admitted, degraded atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 40; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				dec, err := d.Allow(context.Background(), "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if dec.Allowed {
					admitted.Add(1)
				}
				if dec.Degraded {
					degraded.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 25 || degraded.Load() != 400 || f.calls.Load() > 40 {
		t.Fatalf("admitted %d, degraded %d, calls %d", admitted.Load(), degraded.Load(), f.calls.Load())
	}
}

// TestDegradeMultiAndShadow: a Multi's policies fall back together, all or
// nothing; a shadow limiter's fallback only watches; a full in-process
// limiter fails with ErrServerDown.
func TestDegradeMultiAndShadow(t *testing.T) {
	ctx := context.Background()
	m := &multiStub{flaky{p: Policy{Name: "persec", Limit: 4, Window: time.Second}}, []Policy{
		{Name: "persec", Limit: 4, Window: time.Second}, {Name: "permin", Limit: 6, Window: time.Minute}}}
	m.set(refused)
	clk := newClock()
	d, _ := Degrade(m, WithInstances(2), WithFailures(1), withBreakerClock(clk.now), WithLocalKeys(2))
	if got := d.parts; len(got) != 2 || got[1].Name != "permin" {
		t.Fatalf("policies %v", got)
	}
	dec, _ := d.Allow(ctx, "k", 2)
	if !dec.Allowed || dec.Policy != "persec" || dec.Remaining != 0 || len(dec.Policies) != 2 || dec.Policies[1].Remaining != 1 {
		t.Fatalf("first: %+v", dec)
	}
	dec, _ = d.Allow(ctx, "k", 1)
	if dec.Allowed || dec.Policy != "persec" || dec.RetryAfter != time.Second {
		t.Fatalf("second: %+v", dec)
	}
	clk.add(time.Second)
	dec, _ = d.Allow(ctx, "k", 2) // persec has room; permin has 1
	if dec.Allowed || dec.Policy != "permin" || dec.RetryAfter != 59*time.Second {
		t.Fatalf("third: %+v", dec)
	}
	if dec, _ = d.Allow(ctx, "k", 1); !dec.Allowed || dec.Policy != "permin" || dec.Remaining != 0 {
		t.Fatalf("fourth: %+v", dec)
	}
	// Full: two keys with live events, a third is refused.
	if _, err := d.Allow(ctx, "k2", 1); err != nil {
		t.Fatal(err)
	}
	_, err := d.Allow(ctx, "k3", 1)
	if !errors.Is(err, ErrServerDown) || d.mem.len() != 2 {
		t.Fatalf("full: %v, %d keys", err, d.mem.len())
	}
	clk.add(time.Minute)
	if _, err := d.Allow(ctx, "k3", 1); err != nil {
		t.Fatalf("after the events left: %v", err)
	}

	f := &flaky{p: policyOf(1)}
	f.set(refused)
	sd, _ := Degrade(Shadow(f), WithFailures(1))
	allow1(t, sd)
	if dec := allow1(t, sd); !dec.Allowed || !dec.WouldRefuse || !dec.Degraded {
		t.Fatalf("shadow: %+v", dec)
	}
}

type multiStub struct {
	flaky
	ps []Policy
}

func (m *multiStub) policies() []Policy { return m.ps }

// TestDegradeShareRoundsDown: a degraded instance's share is limit / N
// rounded down, for limits that N does not divide (10 / 3 is 3, not 4; 3 / 4
// is 0: that instance admits nothing in process), for a sliding-window
// policy and for a GCRA's, whose share is rate / N per period (its burst
// plays no part). Each instance admits exactly its share in a window, is
// refused the next unit, and admits its share again once the window has
// passed; the decisions report the share as their Limit. Rounding the share
// up (or taking a GCRA's burst) admits more and fails.
func TestDegradeShareRoundsDown(t *testing.T) {
	for _, tt := range []struct {
		p     Policy
		n     int
		share int64
	}{
		{Policy{Name: "p", Limit: 10, Window: time.Second, Algorithm: "log"}, 3, 3},
		{Policy{Name: "p", Limit: 7, Window: time.Second, Algorithm: "sliding-window"}, 2, 3},
		{Policy{Name: "p", Limit: 11, Window: time.Second, Algorithm: "sliding-window"}, 4, 2},
		{Policy{Name: "p", Limit: 3, Window: time.Second, Algorithm: "log"}, 4, 0},
		// A GCRA's Policy, as NewGCRA reports it: Limit rate, Window period.
		{Policy{Name: "g", Limit: 10, Window: time.Second, Burst: 7, Algorithm: "gcra"}, 3, 3},
		{Policy{Name: "g", Limit: 5, Window: time.Second, Burst: 20, Algorithm: "gcra"}, 2, 2},
	} {
		name := fmt.Sprintf("%s %d/%d", tt.p.Algorithm, tt.p.Limit, tt.n)
		f := &flaky{p: tt.p}
		f.set(refused)
		clk := newClock()
		d, err := Degrade(f, WithInstances(tt.n), WithFailures(1), withBreakerClock(clk.now))
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 2; round++ {
			admitted := int64(0)
			for i := int64(0); i <= tt.share; i++ {
				dec := allow1(t, d)
				if !dec.Degraded || dec.Limit != tt.share {
					t.Fatalf("%s: %+v, want a degraded decision with Limit %d", name, dec, tt.share)
				}
				if dec.Allowed {
					admitted++
				}
				clk.add(10 * time.Millisecond)
			}
			if admitted != tt.share {
				t.Fatalf("%s, window %d: %d admitted of %d calls, want the share %d", name, round, admitted, tt.share+1, tt.share)
			}
			clk.add(tt.p.Window)
		}
	}
}
