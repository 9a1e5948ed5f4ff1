// Package refusal remembers refusals in process memory, so that a cost a
// limit refused is refused again, until the refusal's retry time, without a
// server call. It is exact for limits whose costs are at least 0: until a
// refusal's RetryAfter has passed, the state it was decided on can only move
// towards refusing (more cost counted; buckets leave the window no earlier
// than the retry says), so the same cost is refused, with the same retry
// time. (A larger cost is refused too, but its retry may be later: it is
// not answered, so that every RetryAfter stays exact.)
// Whatever gives cost back (a refund, an undo, a negative amount) must call
// Forget for the key; one this process does not see can only make a
// remembered refusal refuse what a fresh call would admit, never admit.
package refusal

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/windowstore/windowstore/store"
)

// DefaultSize is how many keys a cache holds when New is given 0.
const DefaultSize = 10000

// Cache holds, per key, the latest refusal that can be answered again: its
// cost, when it was asked, and its Decision. It holds at most its size of
// keys; when full it drops the expired ones, then, if none expired, one key
// it picks at random, so that a new attacker is remembered too. It is safe
// for concurrent use; the zero value is not usable.
type Cache struct {
	mu     sync.Mutex
	size   int
	m      map[string]entry
	hits   atomic.Int64
	base   time.Time    // the cache's start: forgot counts from it, on the monotonic clock
	forgot atomic.Int64 // when Forget was last called, in ns since base
}

type entry struct {
	cost  int64
	got   time.Time // when the reply came: the server decided no later
	until time.Time // the retry counted from before the request was sent: the server decided no earlier
	d     store.Decision
}

// New returns a cache of at most size keys (0: DefaultSize).
func New(size int) *Cache {
	if size <= 0 {
		size = DefaultSize
	}
	return &Cache{size: size, m: make(map[string]entry), base: time.Now()}
}

// Remember keeps d, the decision on cost for key asked at asked (read before
// the request was sent) and answered at got, if it is a refusal that holds
// for a while: not admitted, not degraded, not a shadow's, with a RetryAfter
// above 0 (-1, a cost that never fits, is not kept). It is answered until
// asked + RetryAfter, no later than the server's retry time, with RetryAfter
// counted from got, no earlier than the server's: so a retry at an answered
// RetryAfter is past the server's retry time, as one at the server's own is.
// A refusal asked before the latest Forget (of any key) is not kept: it may
// have been decided before cost was given back.
func (c *Cache) Remember(key string, cost int64, asked, got time.Time, d store.Decision) {
	if d.Allowed || d.Degraded || d.WouldRefuse || d.RetryAfter <= 0 || cost < 0 {
		return
	}
	if f := c.forgot.Load(); f > 0 && int64(asked.Sub(c.base)) <= f {
		return
	}
	e := entry{cost: cost, got: got, until: asked.Add(d.RetryAfter), d: d}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.size {
		for k, old := range c.m {
			if !asked.Before(old.until) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.size {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = e
}

// Refused answers a remembered refusal of key for the same cost at now: the
// refusal's Decision with RetryAfter and ResetAfter counted down to now.
// Sum and Remaining are those of the refusal.
func (c *Cache) Refused(key string, cost int64, now time.Time) (store.Decision, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && !now.Before(e.until) {
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || cost != e.cost {
		return store.Decision{}, false
	}
	c.hits.Add(1)
	gone := now.Sub(e.got)
	d := countDown(e.d, gone)
	if len(e.d.Policies) > 0 {
		d.Policies = make([]store.Decision, len(e.d.Policies))
		for i, p := range e.d.Policies {
			d.Policies[i] = countDown(p, gone)
		}
	}
	return d, true
}

// countDown is d, gone later: its retry and reset, when above 0, less gone,
// rounded up to the millisecond, and a retry never below 1 ms (the refusal
// still holds).
func countDown(d store.Decision, gone time.Duration) store.Decision {
	if d.RetryAfter > 0 {
		d.RetryAfter = max(time.Millisecond, (d.RetryAfter - gone + time.Millisecond - 1).Truncate(time.Millisecond))
	}
	if d.ResetAfter > 0 {
		d.ResetAfter = max(0, (d.ResetAfter - gone + time.Millisecond - 1).Truncate(time.Millisecond))
	}
	return d
}

// Forget drops key's refusal, and keeps none asked before now: cost was
// given back (or is about to be), and a refusal decided before that must not
// outlive it.
func (c *Cache) Forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
	for now := int64(time.Since(c.base)); ; {
		if old := c.forgot.Load(); old >= now || c.forgot.CompareAndSwap(old, now) {
			return
		}
	}
}

// ForgetAll drops every refusal, and keeps none asked before now: Forget of
// every key at once.
func (c *Cache) ForgetAll() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
	c.Forget("")
}

// Hits is how many calls Refused answered.
func (c *Cache) Hits() int64 { return c.hits.Load() }

// Len is how many keys the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

type reportKey struct{}

// Report returns ctx, under which a limiter answering from a cache sets
// *hit: a wrapper that judges the server by its calls (limit.Degrade's
// breaker) learns that no server was asked. One call's ctx only.
func Report(ctx context.Context, hit *bool) context.Context {
	return context.WithValue(ctx, reportKey{}, hit)
}

// Hit tells ctx's Report, if any, that the call was answered from a cache.
func Hit(ctx context.Context) {
	if p, ok := ctx.Value(reportKey{}).(*bool); ok {
		*p = true
	}
}
