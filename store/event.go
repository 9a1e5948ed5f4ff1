package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/keyspace"
)

// Event is one write to a counter, for Record: an amount, with an optional
// identity, event time and limit. Its zero value (apart from Key) is Add: one
// amount, counted now.
type Event struct {
	// Key is the counter's key.
	Key string
	// Delta is the amount to add (any int64, negative allowed), or, with a
	// Limit, the cost (from 0 to 2^53).
	Delta int64
	// ID, when not empty, is the event's id: an event whose ID was seen
	// within the counter's window counts nothing and answers the state now,
	// marked Duplicate (with a Limit, the first call's decision). So a write
	// with an ID is safe to retry, and the store retries it after a
	// connection error (see WithRetries). A queue consumer that replays a
	// batch counts every event once. A refused event writes nothing, not even
	// its id, so a retry is decided anew.
	ID string
	// Time, when not zero, is when the event happened: a late or
	// out-of-order event counts in the bucket of its own time, and never
	// deletes newer buckets. An event whose bucket has left the window fails
	// with ErrTooOld (in a multi-resolution counter, only when it has left
	// every tier's window: the tiers it is still inside count it); one further
	// ahead of the clock than the future tolerance fails with ErrFuture; in
	// both cases nothing is written. An event ahead of the clock within the
	// tolerance counts in the current bucket. A limited event must have no
	// Time: a limit decides now.
	Time time.Time
	// Limit, when not 0, makes the write a decision, as Allow: Delta counts
	// only if the window sum (of the Store's window, or of its Over view's
	// tier) stays at or under Limit (from 1 to 2^53). A limit of 0, which
	// admits only a cost of 0, is Allow's.
	Limit int64
	// NoSum asks for no sums back. On the field-TTL and TairHash backends the
	// write then does not read the counter either: the cheapest write there.
	// It then does not check the other fields of the key (a hash that is not
	// a counter gets a bucket field; another Redis type is still refused with
	// ErrWrongType), nor the window sum's int64 range (each bucket's is
	// checked). On the plain hash it does what a write with sums does (the
	// running total must stay exact), and saves only the reply. With an ID it
	// still reads the id's marker. Not with a Limit, which needs the sum.
	NoSum bool
}

// Added is what Record did: its Decision (always allowed without a Limit),
// and, for a write without a Limit, every tier's sum.
type Added struct {
	// Decision has the window sum after the write (Sum; 0 with NoSum),
	// Duplicate, and for a limited event the limit's figures.
	Decision
	// Sums has the sum of every tier (see WithTiers), the Window's first; nil
	// for a limited event and with NoSum.
	Sums []int64
	// Counted has, for every tier, whether the event counted in it: false
	// where a late event's bucket had left that tier's window, or the event
	// was refused or a duplicate.
	Counted []bool
}

// Record writes one event (see Event): the general write, of which Add and
// Allow are the shorthands. Most callers need it only for event ids (exactly
// once), event times (late events), or NoSum.
func (s *Store) Record(ctx context.Context, e Event) (_ Added, err error) {
	if e.Limit != 0 {
		ctx, end := s.start(ctx, "allow")
		defer func() { end(err) }()
		switch {
		case !e.Time.IsZero():
			return Added{}, invalid("allow", e.Key, "an event time has no place in a limited event, which decides now")
		case e.NoSum:
			return Added{}, invalid("allow", e.Key, "a limited event needs its sum: NoSum is not for it")
		}
		d, err := allowAll(ctx, e.ID, e.Delta, []Quota{{Store: s, Key: e.Key, Limit: e.Limit}})
		if err != nil {
			return Added{}, rename(err, "allow")
		}
		counted := make([]bool, len(s.tiers))
		for i := range counted {
			counted[i] = d.Allowed && !d.Duplicate
		}
		return Added{Decision: d, Counted: counted}, nil
	}
	ctx, end := s.start(ctx, "add")
	defer func() { end(err) }()
	if e.ID == "" && e.Time.IsZero() && len(s.tiers) == 1 {
		// The shorthands' one-op scripts.
		if e.NoSum {
			return Added{Decision: Decision{Allowed: true}, Counted: []bool{true}}, s.addNoSum(ctx, e.Key, e.Delta)
		}
		n, err := s.add(ctx, e.Key, e.Delta)
		if err != nil {
			return Added{}, err
		}
		return Added{Decision: Decision{Allowed: true, Sum: n}, Sums: []int64{n}, Counted: []bool{true}}, nil
	}
	kind := OpCount
	if e.NoSum {
		kind = countQuiet
	}
	return s.addEvent(ctx, e, kind)
}

func (s *Store) addEvent(ctx context.Context, e Event, kind OpKind) (Added, error) {
	res, err := apply(ctx, []Batch{{ID: e.ID, Time: e.Time, Ops: []Op{{Store: s, Key: e.Key, Kind: kind, Delta: e.Delta}}}})
	if err != nil {
		return Added{}, rename(first(err), "add")
	}
	r := res[0]
	v := r.Values[0]
	return Added{Decision: Decision{Allowed: true, Sum: v.Sum, Duplicate: r.Duplicate}, Sums: v.Sums, Counted: v.CountedTiers}, nil
}

// A Quota is a limit on one counter's window, for AllowAll.
type Quota struct {
	// Store is the counter's store; an Over view limits the tier whose
	// window is its span.
	Store *Store
	// Key is the counter's key.
	Key string
	// Limit is the most the window may hold: from 0 to 2^53.
	Limit int64
}

// AllowAll counts cost in every quota's counter only if every quota admits
// it: for example 5 logins per minute and 100 per hour on one key (the tiers
// of one multi-resolution store, through Over views, or stores of one
// prefix), or limits on a user, an IP and a device at once. A refusal by any
// quota leaves no count anywhere. Quotas whose counters share a Redis
// Cluster slot (one key, or one Entity) are decided in one script, atomically;
// across slots, AllowAll decides as ApplyAll does (one script call on a
// server that is not a cluster; on a cluster, a reservation per slot, taken
// back by one more round trip when a slot refuses). For several limits on one
// key, limit.Combine wraps it as a Limiter.
//
// The Decision's top-level fields are those of the quota that decides: the
// one that refuses (with the latest retry, when several do), or else the one
// with the least remaining. RetryAfter is the earliest time at which every
// quota admits the cost, if nothing else is counted meanwhile: a retry then
// succeeds, one a millisecond earlier fails. Decision.Policies has every quota's own
// decision, in order: its Allowed says whether that quota admitted the cost
// (so a quota of a refused decision may say true).
func AllowAll(ctx context.Context, cost int64, quotas ...Quota) (_ Decision, err error) {
	ctx, end := observeQuotas(ctx, quotas)
	defer func() { end(err) }()
	return allowAll(ctx, "", cost, quotas)
}

// observeQuotas starts an "allow" for the observer of the first quota's
// store.
func observeQuotas(ctx context.Context, quotas []Quota) (context.Context, func(error)) {
	if len(quotas) > 0 && quotas[0].Store != nil {
		return quotas[0].Store.start(ctx, "allow")
	}
	return ctx, noEnd
}

func allowAll(ctx context.Context, id string, cost int64, quotas []Quota) (Decision, error) {
	d, _, err := allowAllWith(ctx, id, cost, quotas, nil)
	return d, err
}

// AllowAllWith is AllowAll with one more operation in the decision: a
// lease's Acquire (limit.Concurrency.AcquireWith takes a lease only if rate
// limits admit the request, and counts their cost only if a lease is free),
// or a Limit of another cost. An op that is not a limit (a Count) writes
// whatever the decision, as in ApplyAll. It answers op's Value beside the
// Decision, which is the quotas' save that op's refusal (an Acquire with
// no lease free, a Limit full) refuses it too; Policies holds the quotas'
// own decisions only. The op runs in the batch of its slot, first.
func AllowAllWith(ctx context.Context, op Op, cost int64, quotas ...Quota) (_ Decision, _ Value, err error) {
	ctx, end := observeQuotas(ctx, quotas)
	defer func() { end(err) }()
	return allowAllWith(ctx, "", cost, quotas, &op)
}

// OneCall reports whether AllowAllWith decides op with the quotas in one
// script call for certain: their stores share a client, and their counters
// one Redis Cluster slot (as one key's, or one Entity's, do). Elsewhere it
// decides all or nothing too, in more round trips on a cluster or across
// clients (see ApplyAll).
func OneCall(op Op, quotas ...Quota) bool {
	at, ok := Quota{Store: op.Store, Key: op.Key}.slot()
	for _, p := range quotas {
		w, pok := p.slot()
		ok = ok && pok && w == at
	}
	return ok
}

func allowAllWith(ctx context.Context, id string, cost int64, quotas []Quota, lead *Op) (Decision, Value, error) {
	if len(quotas) == 0 {
		return Decision{}, Value{}, invalid("allow", "", "no quota")
	}
	// One batch per client and slot, in the order of each one's first op;
	// at[i] is where quota i's op is.
	type place struct{ batch, op int }
	at := make([]place, len(quotas))
	var batches []Batch
	slots := map[where]int{}
	if lead != nil {
		p := Quota{Store: lead.Store, Key: lead.Key}
		if slot, ok := p.slot(); ok {
			slots[slot] = 0
		}
		batches = append(batches, Batch{ID: id, Ops: []Op{*lead}})
	}
	for i, p := range quotas {
		o := Op{Store: p.Store, Key: p.Key, Kind: OpLimit, Limit: p.Limit, Delta: cost}
		b := 0
		if slot, ok := p.slot(); ok {
			j, seen := slots[slot]
			if !seen {
				j = len(batches)
				slots[slot] = j
				batches = append(batches, Batch{ID: id})
			}
			b = j
		} else if len(batches) == 0 {
			batches = append(batches, Batch{ID: id}) // makePlan reports it
		}
		at[i] = place{b, len(batches[b].Ops)}
		batches[b].Ops = append(batches[b].Ops, o)
	}
	res, err := applyAll(ctx, batches)
	if err != nil {
		return Decision{}, Value{}, rename(first(err), "allow")
	}
	r := Decision{Allowed: true, Duplicate: true}
	for _, br := range res {
		r.Allowed = r.Allowed && br.Allowed
		r.Duplicate = r.Duplicate && br.Duplicate
		if !br.Allowed && (br.RetryAfter < 0 || r.RetryAfter >= 0 && br.RetryAfter > r.RetryAfter) {
			r.RetryAfter = br.RetryAfter
		}
	}
	r.Policies = make([]Decision, len(quotas))
	vals := make([]Value, len(quotas))
	decides, worst := -1, time.Duration(0)
	for i, p := range quotas {
		br := res[at[i].batch]
		v := br.Values[at[i].op]
		vals[i] = v
		t, _ := p.Store.overTier()
		r.Policies[i] = Decision{Allowed: !v.Refused, Limit: v.Limit, Sum: v.Sum, Remaining: v.Remaining,
			RetryAfter: v.RetryAfter, ResetAfter: v.ResetAfter, Duplicate: br.Duplicate,
			Policy: p.Key + p.Store.sub + " " + p.Store.tiers[t].win.String()}
		// The refusing quota with the latest retry (never: -1) decides.
		if v.Refused && (decides < 0 || v.RetryAfter < 0 || worst >= 0 && v.RetryAfter > worst) {
			decides, worst = i, v.RetryAfter
		}
	}
	if decides < 0 {
		decides = bestIndex(vals)
	}
	d := r.Policies[decides]
	r.Limit, r.Sum, r.Remaining, r.ResetAfter, r.Policy = d.Limit, d.Sum, d.Remaining, d.ResetAfter, d.Policy
	if len(quotas) == 1 {
		r.Policies, r.Policy = nil, ""
	}
	var lv Value
	if lead != nil {
		lv = res[0].Values[0]
	}
	return r, lv, nil
}

// where is a batch's place: a client, and a Redis Cluster slot of it.
type where struct {
	client rueidis.Client
	slot   uint16
}

// slot is where the quota's counter is; false when it has none (no store,
// a bad key: the batch's checks report it).
func (p Quota) slot() (where, bool) {
	if p.Store == nil {
		return where{}, false
	}
	rk, err := p.Store.redisKey(p.Key, p.Store.tiers[0].tag)
	if err != nil {
		return where{}, false
	}
	return where{p.Store.client, keyspace.Slot(rk)}, true
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

// first is the first batch's error of an apply call: the one error of a
// batch, or of several, the first that failed.
func first(err error) error {
	var m *ManyError
	if errors.As(err, &m) {
		for _, e := range m.Errs {
			if e != nil {
				return e
			}
		}
	}
	return err
}
