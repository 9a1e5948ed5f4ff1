package limit

import (
	"context"
	"time"

	"github.com/windowstore/windowstore/store"
)

// Shadow returns a limiter that decides and counts exactly as l does but
// never refuses: where l refuses, its decision has Allowed true and
// WouldRefuse true, and keeps l's Remaining, RetryAfter and ResetAfter. Since
// l counts nothing it refuses, the shadow's counters are those l would have
// if it were enforced, so shadow mode previews a limit before it is enforced.
// Shadow of a shadow, or of nil, is its argument.
//
// A shadow limiter is safe for concurrent use if l is. It is not a sliding
// window: Combine refuses it.
func Shadow(l Limiter) Limiter {
	if l == nil {
		return nil
	}
	if _, ok := l.(shadow); ok {
		return l
	}
	return shadow{l}
}

type shadow struct{ l Limiter }

func (s shadow) Policy() Policy { return s.l.Policy() }

func (s shadow) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	d, err := s.l.Allow(ctx, key, n)
	return watch(d), err
}

func (s shadow) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	d, err := s.l.AllowAt(ctx, t, key, n)
	return watch(d), err
}

// watch turns a refusal into a shadow decision: Allowed and WouldRefuse
// true, every other field as it was (a combination's Policies too). An admission
// is returned as it is.
func watch(d store.Decision) store.Decision {
	if !d.Allowed {
		d.Allowed, d.WouldRefuse = true, true
		for i := range d.Policies {
			d.Policies[i] = watch(d.Policies[i])
		}
	}
	return d
}
