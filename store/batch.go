package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/batch"
	"github.com/windowstore/windowstore/internal/engine"
)

// OpKind is what an Op does to its counter.
type OpKind int

const (
	// OpCount adds Delta to the counter (every tier of its store), like Add;
	// with NoSum it answers no sum.
	OpCount OpKind = iota
	// OpLimit is a limit on the counter's window (the Store's, or its Over
	// view's tier): Delta is the cost, counted (in every tier) only if every
	// OpLimit of the batch admits its own cost, all or nothing.
	OpLimit
	// OpDistinct adds Members to the counter's distinct count (a HyperLogLog
	// per bucket) and answers the number of distinct members in the window.
	// With no Members it only reads the count.
	OpDistinct
	// OpRead answers the counter's window sums and writes nothing; with a
	// Stat, the statistic's value (Value.Stat).
	OpRead
	// OpAcquire takes a lease on the key, a concurrency limit: at most Limit
	// leases of the key are held at once, each until Release ends it or its
	// TTL passes (so a holder that crashed frees its lease). It is a limit of
	// the batch, decided all or nothing with the batch's Limits: it takes the
	// lease only if they admit their costs, and they count them only if a
	// lease is free. Lease is the lease's id; empty, Apply makes a random one
	// (Value.Lease). An id already held always fits, and is refreshed, so a
	// resent OpAcquire holds one lease. Value.Sum is the number of leases held
	// after the op; Value.Counted, whether it acquired.
	OpAcquire
	// OpRefresh ends the held lease Lease TTL from now (Value.Counted true);
	// a lease no longer held is not taken again (false).
	OpRefresh
	// OpRelease ends the held lease Lease now (Value.Counted true; false when
	// it was not held: released before, or ended by its TTL).
	OpRelease
	// OpStat records an event in the window statistic Stat of the key (see
	// Store.RecordStat): Delta is its amount (First and Last take the batch's
	// Time, or now). Value.Stat is the statistic after it. Like a Count it
	// counts whatever the Limits decide.
	OpStat
	// countQuiet is a Count with NoSum.
	countQuiet OpKind = -1
)

// An Op is one counter's part in a Batch.
type Op struct {
	// Store is the counter's store: its window (and tiers), prefix, entity
	// and client.
	Store *Store
	// Key is the counter's key.
	Key string
	// Kind is what the op does.
	Kind OpKind
	// Delta is the amount to add (Count), or the cost (Limit: from 0 to
	// 2^53).
	Delta int64
	// NoSum makes a Count answer no sum: the cheapest write (see Event.NoSum).
	NoSum bool
	// Limit is the limit of a Limit op: from 0 to 2^53.
	Limit int64
	// Members are the members a Distinct op adds: at least one.
	Members []string
	// Stat is the statistic an OpStat op records in, or an OpRead reads
	// (any but StatDistinct, which is an OpDistinct op).
	Stat Stat
	// Lease is the lease id of an Acquire, Refresh or Release: at most 128
	// bytes, with no spaces.
	Lease string
	// TTL is how long an Acquire or a Refresh holds its lease, unless it is
	// released or refreshed: a whole number of ms, from 1 ms to 2^40 ms.
	TTL time.Duration

	tier int // the tier of the Store's Over view: the window a Limit limits, or whose sum Value.Sum is
}

// A Batch is a set of operations on counters of one Redis Cluster slot (one
// key's counters in several stores of one prefix, or one Entity's counters),
// done atomically in one script call.
type Batch struct {
	// ID, when not empty, is the event's id: a batch whose ID was seen within
	// the longest window of its ops writes nothing and answers the counters'
	// state now, marked Duplicate, with the first call's decision. A batch
	// with an ID is retried by the store after a connection error (see
	// WithRetries): it counts once. The id is kept under the first op's
	// counter, so batches that mean the same event must start with the same
	// op.
	ID string
	// Time, when not zero, is when the event happened: its writes count in
	// the buckets of that time (a late event counts in its own bucket, and
	// never deletes newer ones). An op whose bucket has already left its
	// window counts nothing (Value.Counted false); when no op can count the
	// event (no op of any batch of an ApplyAll) it fails with ErrTooOld, and
	// nothing is written, its id not kept. A time further ahead of the clock
	// than the future tolerance fails with ErrFuture. Limits always decide at
	// the clock's now.
	Time time.Time
	// Ops are the batch's operations, at most one Count or Distinct, or any
	// number of Limits, per counter.
	Ops []Op

	resend bool // safe to send again after a lost reply: an observation that writing twice leaves as it is
}

// BatchResult is what a Batch did.
type BatchResult struct {
	// Allowed reports whether every Limit admitted its cost (true when there
	// is none). A duplicate answers the first call's decision.
	Allowed bool
	// Duplicate reports that the batch's ID was seen before: nothing was
	// written now.
	Duplicate bool
	// RefusedBy is the index in Ops of the Limit that decides a refusal: the
	// one whose retry is the latest; -1 when allowed.
	RefusedBy int
	// RetryAfter is 0 when allowed; when refused, the time until every limit
	// admits its cost, if nothing else is counted meanwhile (a retry then
	// succeeds, one a millisecond earlier fails); -1 when a cost exceeds its
	// limit and never fits.
	RetryAfter time.Duration
	// Values has one entry per op, in order.
	Values []Value
}

// Value is one op's answer.
type Value struct {
	// Counted reports whether the op counted its delta: false for a late
	// event whose bucket had left the window, for a refused Limit, and for a
	// duplicate.
	Counted bool
	// Sum is the window sum after the op (Count, Limit, Read), of the
	// Store's window or its Over view's, or the number of distinct members in
	// the window (Distinct). 0 for a Count with NoSum.
	Sum int64
	// Sums has the sum of every tier of the counter, the Window first, and
	// CountedTiers whether each tier counted the delta (false where a late
	// event's bucket had left that tier's window): Count and Distinct.
	Sums         []int64
	CountedTiers []bool
	// Limit, Remaining, RetryAfter and ResetAfter are a Limit op's, as in
	// Decision, and Limit, Remaining and RetryAfter an Acquire's: the most
	// leases, how many more are free, and for a refusal the time until the
	// first held lease ends by its TTL (a Release may free one sooner; -1
	// when Limit is 0).
	Limit, Remaining       int64
	RetryAfter, ResetAfter time.Duration
	// Refused reports that a Limit or Acquire op refused its cost: for a
	// duplicate, that it refused the first call (RetryAfter is then its wait
	// from now, 0 when it would admit the cost now).
	Refused bool
	// Lease is an Acquire's lease id: Op.Lease, or the one Apply made.
	Lease string
	// Stat is an Observe's statistic after the op, or a Read's of a Stat.
	Stat StatValue
}

// Apply runs the batches, each atomically in one script call, all in one
// round trip per node: batches of different slots go out in parallel. Each
// batch is an event of its own: one that fails does not stop the others,
// and writes nothing itself; the results of those that succeeded are
// returned with an error that is a *ManyError (one entry per batch). A batch
// that breaks the rules (keys of several slots, an op twice on one counter,
// a limit out of range) fails with ErrInvalid before anything is sent. A
// batch runs at the instant of its ops' stores: the store's clock, or the
// instant of their At view (all ops of a batch must agree).
//
// Most callers should use the Store's methods, AllowAll for several limits,
// or ApplyAll for one event across batches.
func Apply(ctx context.Context, batches ...Batch) (_ []BatchResult, err error) {
	ctx, end := observe(ctx, batches, "apply")
	defer func() { end(err) }()
	return apply(ctx, batches)
}

// observe starts an operation for the observer of the first op's store (a
// no-op without one). The exported entry points observe; apply, which they
// and the other operations share, does not, so that each call the caller
// makes is observed once.
func observe(ctx context.Context, batches []Batch, op string) (context.Context, func(error)) {
	if len(batches) > 0 && len(batches[0].Ops) > 0 && batches[0].Ops[0].Store != nil {
		return batches[0].Ops[0].Store.start(ctx, op)
	}
	return ctx, noEnd
}

// apply runs independent batches, each its own event: on a server that is
// not a cluster in one script call, which concurrent callers' operations may
// share; else each through its store's batcher (on a cluster, one script
// call per slot, in one DoMulti per node).
func apply(ctx context.Context, batches []Batch) ([]BatchResult, error) {
	out := make([]BatchResult, len(batches))
	errs := make([]error, len(batches))
	type call struct {
		p   *plan
		i   int
		msg engine.Reply
		err error
	}
	var calls []*call
	var ps []*plan
	for i, b := range batches {
		p, err := makePlan(b)
		if err != nil {
			errs[i] = err
			continue
		}
		calls = append(calls, &call{p: p, i: i})
		ps = append(ps, p)
	}
	send := func(c *call, hdr []string) {
		rs, err := engine.Run(ctx, []engine.Part{c.p.part(hdr)}, false)
		if err == nil {
			c.msg = rs[0]
		}
		c.err = err
	}
	if hdr := joinable(ps); hdr != nil {
		// One server: every batch in one script call (one op each).
		b := ps[0].st.writes
		ops := make([]*batch.Op, len(calls))
		for i, c := range calls {
			ops[i] = b.NewOp(ctx, c.p.group.Keys, hdr, c.p.group.Op())
		}
		b.DoAll(ctx, ops)
		for i, c := range calls {
			vals := ops[i].Vals
			err := c.p.st.be.Write.AsScriptError(ops[i].Err)
			if err != nil && c.p.st.retries > 0 && ctx.Err() == nil && resend(err, c.p.group.Retry) {
				send(c, hdr) // resent on its own, as Store.run resends
				continue
			}
			if err == nil {
				c.msg, err = engine.ParseReply(vals, len(c.p.items))
			}
			c.err = err
		}
	} else {
		done := make(chan struct{})
		for _, c := range calls {
			go func() {
				send(c, c.p.st.header())
				done <- struct{}{}
			}()
		}
		for range calls {
			<-done
		}
	}
	for _, c := range calls {
		err := c.err
		if err == nil {
			out[c.i], err = c.p.result(c.msg)
		}
		if err == nil && c.msg.Late() && !c.msg.Duplicate() && !c.p.decides() {
			err = tooOld(batches[c.i].Ops[0].Key)
		}
		if err != nil {
			errs[c.i] = fail("apply", batches[c.i].Ops[0].Key, c.p.st.be.Write, unwrapPart(err))
		}
	}
	return out, many(errs)
}

// tooOld is the error of an event no op of which could count.
func tooOld(key string) error {
	return &Error{Op: "apply", Key: key, Kind: ErrTooOld, Detail: "the event time is before every window; nothing was written"}
}

// unwrapPart is the error of an event's part without package engine's
// wrapping.
func unwrapPart(err error) error {
	var pe *engine.Error
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// part is the plan as a part of an event, sent at the clock of hdr.
func (p *plan) part(hdr []string) engine.Part {
	return engine.Part{Group: &p.group, Via: sender{p.st, hdr}, Items: len(p.items)}
}

// decides reports whether the plan has a limit or an acquire.
func (p *plan) decides() bool {
	for _, o := range p.ops {
		if o.Kind == OpLimit || o.Kind == OpAcquire {
			return true
		}
	}
	return false
}

// sameInstant reports whether two At views' instants are the same (nil: the
// store's clock).
func sameInstant(a, b *time.Time) bool {
	return a == b || (a != nil && b != nil && a.Equal(*b))
}

// eventError words the error of one part of an event (ApplyAll): the part's
// error, as a *ManyError whose other entries are nil. Whether anything was
// written is the part's to say: only a cluster's reservation that failed
// after every check had passed may leave the event's other parts written.
func eventError(batches []Batch, ps []*plan, err error) error {
	var pe *engine.Error
	i, written, sure := 0, false, false
	if errors.As(err, &pe) {
		i, written, err = pe.Part, pe.Written, pe.Err
		sure = pe.Checked
	}
	sure = !written && (sure || backend.Classify(err) == backend.Answered)
	e := fail("apply", batches[i].Ops[0].Key, ps[i].st.be.Write, err)
	if se, ok := e.(*Error); ok {
		c := *se
		switch {
		case written:
			c.Detail = strings.Replace(c.Detail, "; nothing was written", "", 1) +
				"; this batch wrote nothing, but the event's other batches were written (their limits' costs taken back)"
		case sure && !strings.Contains(c.Detail, "nothing was written"):
			c.Detail = strings.TrimPrefix(c.Detail+"; nothing was written", "; ")
		}
		e = &c
	}
	errs := make([]error, len(batches))
	errs[i] = e
	return &ManyError{Errs: errs, event: true}
}
