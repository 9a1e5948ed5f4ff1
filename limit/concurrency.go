package limit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/store"
)

// Concurrency limits how many requests of a key are in flight at once, where
// the other limiters limit how many start in a window. Each request holds a
// lease from Acquire to Release; at most max leases of a key are held at any
// instant, exactly, however many callers race.
//
// A lease also ends by itself ttl after it was taken or last refreshed, so a
// holder that crashed, or lost its connection before Release, frees its lease
// within ttl. A holder that may work longer than ttl must Refresh its lease
// in time, or another request may take it.
//
//	inflight, err := limit.NewConcurrency(st, "inflight", 10, 30*time.Second)
//	...
//	l, err := inflight.Acquire(ctx, "user:42")
//	if err != nil || !l.Allowed {
//		return // refuse: 10 requests of user 42 are in flight
//	}
//	defer inflight.Release(context.WithoutCancel(ctx), "user:42", l.ID)
//
// Most callers need Acquire and Release, or package httplimit's
// Rule.InFlight, which does both around a handler; Refresh is for holders
// that may outlive ttl.
//
// The leases of key are one sorted set in key's Redis Cluster slot, named as
// the store's counter of key in the view st.Sub(name) with "lease" in place
// of the window (prefix + "{" + escape(key) + "}:" + name + ":lease"), each
// lease scored by the instant it ends on the store's clock. So a lease can be
// decided with the key's rate limits in one script, all or nothing: put the
// op of Op in their batch (store.Apply). Acquire is exactly that batch with
// one op.
//
// A Concurrency is safe for concurrent use. Its zero value is not usable;
// create it with NewConcurrency.
type Concurrency struct {
	st     *store.Store
	policy Policy
	max    int64
	ttl    time.Duration
}

// Lease is what Acquire answers: the lease's ID, for Release and Refresh,
// and the decision. In the decision, Allowed reports whether the lease was
// taken, Limit is max, Sum the number of leases of the key held after the
// call (this one included when taken), Remaining how many more are free, and,
// when refused, RetryAfter the time until the first held lease ends by its
// ttl: an upper bound, since a Release frees one sooner.
//
// For example, with max 2 and two leases held, the first taken 10 s ago with
// a ttl of 30 s:
//
//	Acquire(ctx, "user:42") -> {ID: "...", Decision: {Allowed: false, Limit: 2, Sum: 2,
//	                                                  Remaining: 0, RetryAfter: 20s}}
type Lease struct {
	ID string
	store.Decision
}

// NewConcurrency returns a concurrency limit of max leases per key, each held
// for ttl unless released or refreshed, kept through st's client and prefix on
// st's clock (the store's window plays no part). max is from 0 (refuse every
// request) to 2^53; ttl a whole number of milliseconds from 1 ms to about 34
// years. Its Policy has Limit max, Window ttl and Algorithm "concurrency".
func NewConcurrency(st *store.Store, name string, max int64, ttl time.Duration) (*Concurrency, error) {
	if st == nil {
		return nil, newError(name, store.ErrInvalid, "nil store")
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if max < 0 || max > maxExact {
		return nil, newError(name, store.ErrInvalid, "max "+strconv.FormatInt(max, 10)+" is not within [0, 2^53]")
	}
	if ttl < time.Millisecond || ttl > backend.MaxLeaseTTL || ttl%time.Millisecond != 0 {
		return nil, newError(name, store.ErrInvalid, "ttl "+ttl.String()+" is not a whole number of milliseconds from 1ms to 2^40 ms")
	}
	return &Concurrency{st: st.Sub(name), policy: Policy{Name: name, Limit: max, Window: ttl, Algorithm: "concurrency"},
		max: max, ttl: ttl}, nil
}

// Policy returns the limit's policy.
func (c *Concurrency) Policy() Policy { return c.policy }

// Op is the op that takes lease id (a new random one when empty: the
// result's Value.Lease) on key, to decide it with other limits of key's slot
// in one store.Apply batch: the lease is taken only if every limit of the
// batch admits its cost, and their costs count only if a lease is free.
func (c *Concurrency) Op(key, id string) store.Op {
	return store.Op{Store: c.st, Key: key, Kind: store.OpAcquire, Limit: c.max, Lease: id, TTL: c.ttl}
}

// Acquire takes a lease on key if fewer than max are held, or refuses. A
// reply lost to a connection error is resent as the store resends (see
// store.WithRetries): the lease id makes it count once.
func (c *Concurrency) Acquire(ctx context.Context, key string) (Lease, error) {
	v, err := c.one(ctx, c.Op(key, ""))
	if err != nil {
		return Lease{}, err
	}
	return Lease{ID: v.Lease, Decision: store.Decision{Allowed: v.Counted, Limit: c.max, Sum: v.Sum,
		Remaining: v.Remaining, RetryAfter: v.RetryAfter, Policy: c.policy.Name}}, nil
}

// Refresh ends lease id of key ttl from now instead, and reports true, if it
// is still held; a lease that has ended (released, or past its ttl) is not
// taken again: false.
func (c *Concurrency) Refresh(ctx context.Context, key, id string) (bool, error) {
	v, err := c.one(ctx, store.Op{Store: c.st, Key: key, Kind: store.OpRefresh, Lease: id, TTL: c.ttl})
	return v.Counted, err
}

// Release ends lease id of key now and reports true if it was held; false
// when it had already ended (released before, or past its ttl), so a second
// Release changes nothing. Pass it a context that outlives the request's
// (context.WithoutCancel): a lease left unreleased is held until its ttl.
func (c *Concurrency) Release(ctx context.Context, key, id string) (bool, error) {
	v, err := c.one(ctx, store.Op{Store: c.st, Key: key, Kind: store.OpRelease, Lease: id})
	return v.Counted, err
}

// AcquireWith takes a lease of key only if limiter l admits cost, and counts
// cost in l only if a lease is free: one decision, all or nothing, in one
// script call (store.AllowAllWith). l must be a sliding window
// (NewSlidingWindow), or a combination of them (Combine), whose stores
// share c's client, so that the call is one (store.OneCall); for another, AcquireWith answers ok
// false, having sent nothing, and the caller takes the lease and asks l in
// turn, as httplimit does.
//
// It answers the lease, whose decision is the lease's own (Allowed: one was
// free) and whose ID is set only when it was taken (both admitted), and l's
// decision as l.Allow would give it, save that a refusal by the lease makes
// it refused too, with the retry of the two.
func (c *Concurrency) AcquireWith(ctx context.Context, key string, l Limiter, cost int64) (_ Lease, _ store.Decision, ok bool, _ error) {
	parts, sliding := slidingParts(l)
	if !sliding {
		return Lease{}, store.Decision{}, false, nil
	}
	m := &multi{parts: parts}
	op, ps := c.Op(key, ""), m.storePolicies(nil, key)
	if !store.OneCall(op, ps...) {
		return Lease{}, store.Decision{}, false, nil
	}
	d, v, err := store.AllowAllWith(ctx, op, cost, ps...)
	if err != nil {
		return Lease{}, store.Decision{}, true, err
	}
	lease := Lease{Decision: store.Decision{Allowed: !v.Refused, Limit: c.max, Sum: v.Sum,
		Remaining: v.Remaining, RetryAfter: v.RetryAfter, Policy: c.policy.Name}}
	if v.Counted {
		lease.ID = v.Lease
	}
	if _, one := l.(*slidingWindow); one {
		d.Policy = m.parts[0].policy.Name
	} else {
		d = m.named(d)
	}
	return lease, d, true, nil
}

// one applies a batch of one op and answers its value.
func (c *Concurrency) one(ctx context.Context, op store.Op) (store.Value, error) {
	res, err := store.Apply(ctx, store.Batch{Ops: []store.Op{op}})
	if err != nil {
		var m *store.ManyError
		if errors.As(err, &m) && len(m.Errs) == 1 && m.Errs[0] != nil {
			err = m.Errs[0] // the batch's own error
		}
		return store.Value{}, err
	}
	return res[0].Values[0], nil
}
