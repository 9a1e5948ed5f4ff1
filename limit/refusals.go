package limit

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/windowstore/windowstore/internal/refusal"
	"github.com/windowstore/windowstore/store"
)

// A RefusalCache remembers, in process memory, the refusals of limiters on
// the server's clock (Allow, never AllowAt), and answers the same cost for
// the same key refused again, until the refusal's RetryAfter has passed,
// without a server call: under an attack, when most
// calls are refused, most cost the server nothing. The answer is the
// refusal's Decision with RetryAfter and ResetAfter counted down; its Sum
// and Remaining are the refusal's.
//
// It never admits, and a refusal it answers is one the server would give:
// until the retry, the limit's state can only move towards refusing, since
// costs are at least 0. Its RetryAfter is counted down from when the
// refusal's reply came, so it is never earlier than the server's (to the
// ms), and later by at most that call's span. (A larger cost would be
// refused too, but perhaps retried later: it asks the server.) A limiter
// remembers only refusals decided in one script call: a combination across
// clients (Combine) keeps none, since a call's reservation there can be
// taken back. A Refund through the limiter forgets the key. Cost given back
// where the limiter cannot see it (a Refund in another process, a store
// write of a negative amount on a sliding window's counter) can make it
// refuse, until that retry, what a fresh call would admit; never the other
// way.
//
// Every limiter has one of its own by default (10,000 keys);
// WithRefusalCache shares one, or, given nil, turns it off. One cache may
// serve many limiters: their keys never meet. A full cache drops its expired
// refusals, then keys at random. A RefusalCache is safe for
// concurrent use; its zero value is not usable: create one with
// NewRefusalCache.
type RefusalCache struct{ c *refusal.Cache }

// NewRefusalCache returns a cache of at most size keys (0 or less: 10,000).
func NewRefusalCache(size int) *RefusalCache { return &RefusalCache{refusal.New(size)} }

// Hits is how many calls the cache answered without a server call.
func (r *RefusalCache) Hits() int64 { return r.c.Hits() }

// Len is how many keys the cache holds now.
func (r *RefusalCache) Len() int { return r.c.Len() }

// WithRefusalCache has a limiter remember its refusals in c (see
// RefusalCache); nil turns the cache off. Every limiter takes it, a
// SlidingWindow too.
func WithRefusalCache(c *RefusalCache) Option {
	return func(o *options) { o.refusals, o.refusalsSet, o.limiter = c, true, true }
}

// limiterIDs tells limiters apart in a shared cache.
var limiterIDs atomic.Int64

// refusals is a limiter's refusal cache and its name there.
type refusals struct {
	c  *refusal.Cache // nil: off
	id string
}

// newRefusals is the cache o asks for, or one of the limiter's own.
func newRefusals(o *options) refusals {
	id := strconv.FormatInt(limiterIDs.Add(1), 10) + "\x00"
	if !o.refusalsSet {
		return refusals{refusal.New(0), id}
	}
	if o.refusals == nil {
		return refusals{}
	}
	return refusals{o.refusals.c, id}
}

// refused answers key's remembered refusal of cost n, and the time it
// asked; only on the server's clock (server), the one a refusal is kept on.
func (r refusals) refused(ctx context.Context, server bool, key string, n int64) (store.Decision, time.Time, bool) {
	now := time.Now()
	if r.c == nil || !server {
		return store.Decision{}, now, false
	}
	d, ok := r.c.Refused(r.id+key, n, now)
	if ok {
		refusal.Hit(ctx)
	}
	return d, now, ok
}

// remember keeps d, a decision on cost n for key asked at asked, on the
// server's clock (server).
func (r refusals) remember(server bool, key string, n int64, asked time.Time, d store.Decision) {
	if r.c != nil && server && !d.Allowed {
		r.c.Remember(r.id+key, n, asked, time.Now(), d)
	}
}

// forget drops key's refusal: cost was given back.
func (r refusals) forget(key string) {
	if r.c != nil {
		r.c.Forget(r.id + key)
	}
}
