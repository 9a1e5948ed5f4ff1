package httplimit

import (
	"time"

	"github.com/windowstore/windowstore/internal/refusal"
	"github.com/windowstore/windowstore/store"
)

// LocalTier remembers, in process memory, the refusals of a middleware's
// rules, per rule and key, and answers the same cost refused again with 429,
// until its Retry-After has passed, without a server call. It is the refusal
// cache of package limit (limit.RefusalCache) keyed by rule: a rule of
// several limiters, or with Also parts, is shed in one lookup. It never
// admits, so it can never make the middleware admit more than the limits; a
// larger cost asks the server, whose Retry-After may be later.
//
// It holds at most the number of keys given to NewLocalTier (default
// 100,000); when full it drops its expired refusals, then keys at random.
// The zero value is not usable; create one with NewLocalTier. It is safe for
// concurrent use.
type LocalTier struct{ c *refusal.Cache }

// NewLocalTier returns a local tier that holds at most size keys (0 means 100,000).
func NewLocalTier(size int) *LocalTier {
	if size <= 0 {
		size = 100000
	}
	return &LocalTier{refusal.New(size)}
}

// refused reports whether key (a rule's: named) is remembered refused for
// this cost at now, and by which policy until when.
func (t *LocalTier) refused(key string, cost int64, now time.Time) (string, time.Time, bool) {
	d, ok := t.c.Refused(key, cost, now)
	return d.Policy, now.Add(d.RetryAfter), ok
}

// remember keeps policy's refusal of cost for key, decided at now with a
// retry at until.
func (t *LocalTier) remember(key string, policy string, cost int64, now, until time.Time) {
	t.c.Remember(key, cost, now, now, store.Decision{Policy: policy, RetryAfter: until.Sub(now)})
}

// Hits is how many requests the tier answered without a server call.
func (t *LocalTier) Hits() int64 { return t.c.Hits() }

// Len returns how many keys the tier remembers now.
func (t *LocalTier) Len() int { return t.c.Len() }
