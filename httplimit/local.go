package httplimit

import (
	"time"

	"github.com/windowstore/windowstore/internal/refusal"
	"github.com/windowstore/windowstore/store"
)

// localTier remembers a middleware's refusals per rule and key (see
// WithLocalTier).
type localTier struct{ c *refusal.Cache }

// refused reports whether key (a rule's: named) is remembered refused for
// this cost at now, and by which policy until when.
func (t localTier) refused(key string, cost int64, now time.Time) (string, time.Time, bool) {
	d, ok := t.c.Refused(key, cost, now)
	return d.Policy, now.Add(d.RetryAfter), ok
}

// remember keeps policy's refusal of cost for key, decided at now with a
// retry at until.
func (t localTier) remember(key string, policy string, cost int64, now, until time.Time) {
	t.c.Remember(key, cost, now, now, store.Decision{Policy: policy, RetryAfter: until.Sub(now)})
}
