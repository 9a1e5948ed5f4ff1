// Package limittest has test doubles of package limit for this repository's
// tests, the metrics modules' among them.
package limittest

import (
	"context"
	"testing"
	"time"

	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// Flaky is a limiter whose server fails with Err; with a nil Err it admits
// every call. Set Err between calls, not during them.
type Flaky struct{ Err error }

// Policy is that of a log limiter of 10 a minute named "perminute".
func (f *Flaky) Policy() limit.Policy {
	return limit.Policy{Name: "perminute", Limit: 10, Window: time.Minute, Algorithm: "log"}
}

// Allow fails with Err, or admits n.
func (f *Flaky) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	if f.Err != nil {
		return store.Decision{}, f.Err
	}
	return store.Decision{Allowed: true, Limit: 10, Remaining: 10 - n, Policy: "perminute"}, nil
}

// AllowAt is Allow.
func (f *Flaky) AllowAt(ctx context.Context, _ time.Time, key string, n int64) (store.Decision, error) {
	return f.Allow(ctx, key, n)
}

// Degraded returns a limit.Degraded over a Flaky limiter, whose breaker opens
// after one failure, for a cool-down of an hour: open for the rest of a test.
func Degraded(t testing.TB) (*limit.Degraded, *Flaky) {
	t.Helper()
	f := &Flaky{}
	d, err := limit.Degrade(f, limit.WithFailures(1), limit.WithCooldown(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return d, f
}

// State is a breaker in a state of its own choosing, for a recorder's
// watch: "closed", "half-open", "open", or any other.
type State string

// State returns s.
func (s State) State() string { return string(s) }
