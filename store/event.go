package store

import (
	"context"
	"errors"
	"time"
)

// Event is one write with an optional identity and event time, for the
// ...Event methods.
type Event struct {
	// Key is the counter's key.
	Key string
	// Delta is the amount to add (AddEvent), or the cost (AllowEvent).
	Delta int64
	// ID, when not empty, is the event's id: an event whose ID was seen
	// within the counter's window counts nothing and answers the state now,
	// marked Duplicate. So a write with an ID is safe to retry, and the store
	// retries it after a connection error (see WithRetries). A queue
	// consumer that replays a batch counts every event once.
	ID string
	// Time, when not zero, is when the event happened (AddEvent only): a late
	// or out-of-order event counts in the bucket of its own time, and never
	// deletes newer buckets. An event whose bucket has left the window fails
	// with ErrTooOld (in a multi-resolution counter, only when it has left
	// every tier's window: the tiers it is still inside count it); one further
	// ahead of the clock than the future tolerance fails with ErrFuture; in
	// both cases nothing is written. An event ahead of the clock within the
	// tolerance counts in the current bucket.
	Time time.Time
}

// Added is what AddEvent did.
type Added struct {
	// Sum is the window sum after the write (of the store's Window).
	Sum int64
	// Sums has the sum of every tier (see WithTiers), Sum first.
	Sums []int64
	// Counted has, for every tier, whether the event counted in it: false
	// where a late event's bucket had left that tier's window.
	Counted []bool
	// Duplicate reports that the event's ID was seen before: nothing was
	// counted now, and the sums are the state now.
	Duplicate bool
}

// AddEvent adds e.Delta to key's counter like Add, with an event id and an
// event time when e has them (see Event).
func (s *Store) AddEvent(ctx context.Context, e Event) (_ Added, err error) {
	ctx, end := s.start(ctx, "add")
	defer func() { end(err) }()
	return s.addEvent(ctx, nil, e, Count)
}

// AddEventAt is AddEvent at instant now on the client's clock.
func (s *Store) AddEventAt(ctx context.Context, now time.Time, e Event) (_ Added, err error) {
	ctx, end := s.start(ctx, "add")
	defer func() { end(err) }()
	return s.addEvent(ctx, &now, e, Count)
}

// AddNoSumEvent is AddEvent without the sums, as AddNoSum is Add without
// them. With an id it still reads the id's marker.
func (s *Store) AddNoSumEvent(ctx context.Context, e Event) (_ Added, err error) {
	ctx, end := s.start(ctx, "add")
	defer func() { end(err) }()
	return s.addEvent(ctx, nil, e, CountQuiet)
}

// AddNoSumEventAt is AddNoSumEvent at instant now on the client's clock.
func (s *Store) AddNoSumEventAt(ctx context.Context, now time.Time, e Event) (_ Added, err error) {
	ctx, end := s.start(ctx, "add")
	defer func() { end(err) }()
	return s.addEvent(ctx, &now, e, CountQuiet)
}

func (s *Store) addEvent(ctx context.Context, at *time.Time, e Event, kind Kind) (Added, error) {
	res, err := apply(ctx, at, []Batch{{ID: e.ID, Time: e.Time, Ops: []Op{{Store: s, Key: e.Key, Kind: kind, Delta: e.Delta}}}})
	if err != nil {
		return Added{}, rename(single(err), "add")
	}
	r := res[0]
	v := r.Values[0]
	return Added{Sum: v.Sum, Sums: v.Sums, Counted: v.CountedTiers, Duplicate: r.Duplicate}, nil
}

// AllowEvent is Allow with an event id (see Event): a repeated id within the
// window counts nothing and answers the first call's decision, marked
// Duplicate. A refused call writes nothing, not even its id, so a retry is
// decided anew. e.Time must be zero: a limit decides now.
func (s *Store) AllowEvent(ctx context.Context, e Event, limit int64) (Result, error) {
	return s.allowEvent(ctx, nil, e, limit)
}

// AllowEventAt is AllowEvent at instant now on the client's clock.
func (s *Store) AllowEventAt(ctx context.Context, now time.Time, e Event, limit int64) (Result, error) {
	return s.allowEvent(ctx, &now, e, limit)
}

func (s *Store) allowEvent(ctx context.Context, at *time.Time, e Event, limit int64) (_ Result, err error) {
	ctx, end := s.start(ctx, "allow")
	defer func() { end(err) }()
	if !e.Time.IsZero() {
		return Result{}, invalid("allow", e.Key, "an event time has no place in Allow, which decides now")
	}
	r, err := allowAll(ctx, at, e.ID, e.Delta, []Policy{{Store: s, Key: e.Key, Limit: limit}})
	return r, rename(err, "allow")
}

// A Policy is a limit on one counter's window, for AllowAll.
type Policy struct {
	// Store is the counter's store.
	Store *Store
	// Tier chooses the window of a multi-resolution store (see WithTiers):
	// 0 for the store's Window.
	Tier int
	// Key is the counter's key.
	Key string
	// Limit is the most the window may hold: from 0 to 2^53.
	Limit int64
}

// PolicyResult is one policy's part of an AllowAll decision; its fields mean
// what Result's do.
type PolicyResult struct {
	Window     Window
	Limit      int64
	Sum        int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// AllowAll counts cost in every policy's counter only if every policy admits
// it, atomically, in one script and one round trip: for example 5 logins per
// minute, 100 per hour and 1,000 per day, on one key (three stores of one
// prefix, or the tiers of one multi-resolution store) or on several keys of
// one Entity. A refusal by any policy writes nothing anywhere. The counters
// must share a Redis Cluster slot (ErrInvalid otherwise).
//
// The Result's top-level fields are those of the policy that decides: the
// one that refuses (with the latest retry, when several do), or else the one
// with the least remaining. RetryAfter is the earliest time at which every
// policy admits the cost, if nothing else is counted meanwhile: a retry then
// succeeds, one a millisecond earlier fails. Policies has every policy's
// own figures, in order, and RefusedBy the index of the deciding refusal.
func AllowAll(ctx context.Context, cost int64, policies ...Policy) (_ Result, err error) {
	ctx, end := observePolicies(ctx, policies)
	defer func() { end(err) }()
	return allowAll(ctx, nil, "", cost, policies)
}

// AllowAllAt is AllowAll at instant now on the client's clock.
func AllowAllAt(ctx context.Context, now time.Time, cost int64, policies ...Policy) (_ Result, err error) {
	ctx, end := observePolicies(ctx, policies)
	defer func() { end(err) }()
	return allowAll(ctx, &now, "", cost, policies)
}

// observePolicies starts an "allow" for the observer of the first policy's
// store.
func observePolicies(ctx context.Context, policies []Policy) (context.Context, func(error)) {
	if len(policies) > 0 && policies[0].Store != nil {
		return policies[0].Store.start(ctx, "allow")
	}
	return ctx, noEnd
}

func allowAll(ctx context.Context, at *time.Time, id string, cost int64, policies []Policy) (Result, error) {
	if len(policies) == 0 {
		return Result{}, invalid("allow", "", "no policy")
	}
	ops := make([]Op, len(policies))
	for i, p := range policies {
		ops[i] = Op{Store: p.Store, Tier: p.Tier, Key: p.Key, Kind: Limit, Limit: p.Limit, Delta: cost}
	}
	res, err := apply(ctx, at, []Batch{{ID: id, Ops: ops}})
	if err != nil {
		return Result{}, rename(single(err), "allow")
	}
	br := res[0]
	r := Result{Allowed: br.Allowed, Duplicate: br.Duplicate, RefusedBy: br.RefusedBy}
	r.Policies = make([]PolicyResult, len(policies))
	decides := br.RefusedBy
	for i, v := range br.Values {
		p := policies[i]
		r.Policies[i] = PolicyResult{Window: p.Store.tiers[p.Tier].win, Limit: v.Limit, Sum: v.Sum, Remaining: v.Remaining,
			RetryAfter: v.RetryAfter, ResetAfter: v.ResetAfter}
	}
	if decides < 0 {
		decides = bestIndex(br.Values)
	}
	d := r.Policies[decides]
	r.Limit, r.Sum, r.Remaining, r.ResetAfter = d.Limit, d.Sum, d.Remaining, d.ResetAfter
	r.RetryAfter = br.RetryAfter
	if len(policies) == 1 {
		r.Policies = nil
	}
	return r, nil
}

// bestIndex is the index of the value with the least remaining, the first
// among equals.
func bestIndex(vs []Value) int {
	best := 0
	for i, v := range vs {
		if v.Remaining < vs[best].Remaining {
			best = i
		}
	}
	return best
}

// single is the error of the one batch of an apply call.
func single(err error) error {
	var m *ManyError
	if errors.As(err, &m) && len(m.Errs) == 1 {
		return m.Errs[0]
	}
	return err
}
