package store

import (
	"context"
	"time"
)

// An Observer is told of the store's work, for metrics and traces; the
// metrics/otel module has one for OpenTelemetry. It must be safe for
// concurrent use, and quick: it runs on every operation.
type Observer interface {
	// Start is called when an operation starts, with its name ("add", "sum",
	// "sum many", "allow", "apply", "inspect", "record stat",
	// "read stat") and the caller's context; the function it returns is
	// called once when the operation ends, with its error (nil on success;
	// errors.Is tells its kind). The context it returns is the operation's
	// (for a span).
	Start(ctx context.Context, op string) (context.Context, func(err error))
	// Call is called for every script call the store sends, after its reply:
	// the script ("write" or "sum"), how many operations it carried (coalesced
	// writes, or the keys of a SumMany), how long it took, and its error.
	Call(script string, ops int, d time.Duration, err error)
}

// WithObserver has the store tell o of every operation and script call.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// start begins an operation for the observer; end is a no-op without one.
func (s *Store) start(ctx context.Context, op string) (context.Context, func(err error)) {
	if s.obs == nil {
		return ctx, noEnd
	}
	return s.obs.Start(ctx, op)
}

func noEnd(error) {}
