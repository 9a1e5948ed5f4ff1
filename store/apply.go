package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/batch"
	"github.com/windowstore/windowstore/internal/keyspace"
)

// Kind is what an Op does to its counter.
type Kind int

const (
	// Count adds Delta to the counter (every tier of its store), like Add;
	// with NoSum it answers no sum.
	Count Kind = iota
	// Limit is a limit on the counter's window (the Store's, or its Over
	// view's tier): Delta is the cost, counted (in every tier) only if every
	// Limit of the batch admits its own cost, all or nothing.
	Limit
	// Distinct adds Members to the counter's distinct count (a HyperLogLog
	// per bucket) and answers the number of distinct members in the window.
	// With no Members it only reads the count.
	Distinct
	// Read answers the counter's window sums and writes nothing; with a
	// Stat, the statistic's value (Value.Stat).
	Read
	// Acquire takes a lease on the key, a concurrency limit: at most Limit
	// leases of the key are held at once, each until Release ends it or its
	// TTL passes (so a holder that crashed frees its lease). It is a limit of
	// the batch, decided all or nothing with the batch's Limits: it takes the
	// lease only if they admit their costs, and they count them only if a
	// lease is free. Lease is the lease's id; empty, Apply makes a random one
	// (Value.Lease). An id already held always fits, and is refreshed, so a
	// resent Acquire holds one lease. Value.Sum is the number of leases held
	// after the op; Value.Counted, whether it acquired.
	Acquire
	// Refresh ends the held lease Lease TTL from now (Value.Counted true);
	// a lease no longer held is not taken again (false).
	Refresh
	// Release ends the held lease Lease now (Value.Counted true; false when
	// it was not held: released before, or ended by its TTL).
	Release
	// Observe records an event in the window statistic Stat of the key (see
	// Store.Observe): Delta is its amount (First and Last take the batch's
	// Time, or now). Value.Stat is the statistic after it. Like a Count it
	// counts whatever the Limits decide.
	Observe
	// countQuiet is a Count with NoSum.
	countQuiet Kind = -1
)

// An Op is one counter's part in a Batch.
type Op struct {
	// Store is the counter's store: its window (and tiers), prefix, entity
	// and client.
	Store *Store
	// Key is the counter's key.
	Key string
	// Kind is what the op does.
	Kind Kind
	// Delta is the amount to add (Count), or the cost (Limit: from 0 to
	// 2^53).
	Delta int64
	// NoSum makes a Count answer no sum: the cheapest write (see Event.NoSum).
	NoSum bool
	// Limit is the limit of a Limit op: from 0 to 2^53.
	Limit int64
	// Members are the members a Distinct op adds: at least one.
	Members []string
	// Stat is the statistic an Observe op records in, or a Read reads.
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
	// event the batch fails with ErrTooOld. A time further ahead of the clock
	// than the future tolerance fails with ErrFuture. Limits always decide at
	// the clock's now.
	Time time.Time
	// Ops are the batch's operations, at most one Count or Distinct, or any
	// number of Limits, per counter.
	Ops []Op
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
// round trip per node: batches of different slots go out in parallel. A
// batch that fails does not stop the others: the results of those that
// succeeded are returned with an error that is a *ManyError (one entry per
// batch). A batch that breaks the rules (keys of several slots, an op twice
// on one counter, a limit out of range) fails with ErrInvalid before
// anything is sent. A batch runs at the instant of its ops' stores: the
// store's clock, or the instant of their At view (all ops of a batch must
// agree).
//
// Apply is the building block of package features, for callers who need
// several counters in one atomic step; most callers should use the Store's
// methods, or AllowAll for several limits.
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

// plan is a batch turned into one group operation.
type plan struct {
	st    *Store // the store whose client and backend run it
	first string // its first item's Redis key (a counter's redisKey, a distinct count's first key), which its event id's key begins with
	keys  []string
	args  []string
	items []planItem // in the order of the group's answers
	ops   []Op
	retry bool
	// compacted: args are the compact operation of a group of limits alone
	// (backend.OpLimits, see compact)
	compacted bool
}

// compact rewrites the plan of a group of limits alone, of one cost, without
// an event id or time (store.AllowAll of policies of one slot, such as the
// windows of one key), as the compact operation backend.OpLimits: every
// limit's shape and limit in one argument (the policies, "shape limit shape
// limit...", parsed once per script call for the operations that share
// them), where a group item takes four arguments (an argument costs the
// server several hundred instructions), and, when every counter counts on
// its backend's fast path, an answer of two numbers per limit, where a
// group's is an array per limit. Counters that share a head (the plain
// hash's windows of one key) declare it once (backend.OpLimitsH: three
// limits take four keys, not six; a declared key costs the server more than
// a thousand instructions). Only a group sent alone (Apply's, not a link's
// or a reservation's) can be compact. It reports whether it rewrote the
// plan.
func (p *plan) compact() bool {
	n := len(p.items)
	if n == 0 || p.args[0] != backend.OpGroup || p.args[2] != "" || p.args[4] != "" || len(p.args) != 5+4*n {
		return false
	}
	cost := p.args[5+3]
	var spec strings.Builder
	for j, it := range p.items {
		a := p.args[5+4*j : 5+4*j+4] // kind, shape, limit, cost
		if it.kind != backend.ItemLimit || a[0] != backend.ItemLimit || a[3] != cost {
			return false
		}
		if j > 0 {
			spec.WriteByte(' ')
		}
		spec.WriteString(a[1])
		spec.WriteByte(' ')
		spec.WriteString(a[2])
	}
	op := backend.OpLimits
	if p.st.be.Head && len(p.keys) == 2*n && sharedHead(p.keys) {
		// Counters of one head (the plain hash's windows of one key): their
		// hashes, then the head, declared once.
		keys := make([]string, 0, n+1)
		for j := 0; j < n; j++ {
			keys = append(keys, p.keys[2*j])
		}
		p.keys, op = append(keys, p.keys[1]), backend.OpLimitsH
	}
	p.args, p.compacted = []string{op, strconv.Itoa(n), cost, spec.String()}, true
	return true
}

// sharedHead reports whether the counters of keys (each a hash and a head,
// see counterKeys) all have the same head.
func sharedHead(keys []string) bool {
	for j := 3; j < len(keys); j += 2 {
		if keys[j] != keys[1] {
			return false
		}
	}
	return true
}

// planItem maps a group item back to its op and tier.
type planItem struct {
	op, tier int
	kind     string
	count    bool // Avg's count item (its sum item is the one before)
}

func apply(ctx context.Context, batches []Batch) ([]BatchResult, error) {
	out := make([]BatchResult, len(batches))
	errs := make([]error, len(batches))
	type call struct {
		p    *plan
		i    int
		done chan struct{}
		msg  rueidis.RedisMessage
		err  error
	}
	var calls []*call
	for i, b := range batches {
		p, err := makePlan(b)
		if err != nil {
			errs[i] = err
			continue
		}
		p.compact() // (a group sent alone: its limits alone can be compact)
		calls = append(calls, &call{p: p, i: i, done: make(chan struct{})})
	}
	ps := make([]*plan, len(calls))
	for i, c := range calls {
		ps[i] = c.p
	}
	if hdr := joinable(ps); hdr != nil {
		// A server that is not a cluster: every batch in one script call,
		// which concurrent callers' operations may share.
		b := calls[0].p.st.writes
		ops := make([]*batch.Op, len(calls))
		for i, c := range calls {
			ops[i] = b.NewOp(ctx, c.p.keys, hdr, c.p.args)
		}
		b.DoAll(ctx, ops)
		for i, c := range calls {
			c.msg, c.err = ops[i].Res, ops[i].Err
			if c.err != nil && c.p.st.retries > 0 && ctx.Err() == nil && resend(c.err, c.p.retry) {
				// Resent on its own, as Store.run resends.
				c.msg, c.err = c.p.st.run(ctx, c.p.keys, hdr, c.p.retry, c.p.args...)
			}
			close(c.done)
		}
	} else {
		// Every batch goes to its store's batcher at once: concurrent callers'
		// operations and these share script calls, one DoMulti per flush.
		for _, c := range calls {
			go func() {
				defer close(c.done)
				c.msg, c.err = c.p.st.run(ctx, c.p.keys, c.p.st.header(), c.p.retry, c.p.args...)
			}()
		}
	}
	for _, c := range calls {
		<-c.done
		if c.err == nil {
			out[c.i], c.err = c.p.result(c.msg)
		}
		if c.err != nil {
			errs[c.i] = fail("apply", batches[c.i].Ops[0].Key, c.p.st.be.Write, c.err)
		}
	}
	return out, many(errs)
}

// joinable returns the header (the clock) that the batches of plans ps share
// when they can run in one script call: more than one batch, on a server
// that is not a cluster (where a script may touch any key), through stores
// of one client, backend and way of running scripts, at one instant. It
// returns nil otherwise: then each batch goes through its store's batcher
// (on a cluster, one script call per slot, in one DoMulti per node).
func joinable(ps []*plan) []string {
	if len(ps) < 2 {
		return nil
	}
	f := ps[0].st
	if f.writes.Cluster {
		return nil
	}
	hdr := f.header()
	for _, p := range ps[1:] {
		s := p.st
		if s.client != f.client || s.be != f.be || s.runner.Functions() != f.runner.Functions() || !slices.Equal(s.header(), hdr) {
			return nil
		}
	}
	return hdr
}

// run sends one write operation through the batcher: every write goes
// through it. With retry (an operation with an event id, safe to send
// again) it resends it after a connection error, up to the store's retries,
// while ctx lasts. Any write is resent after TRYAGAIN, which says that
// nothing ran (a cluster slot is moving, and the operation's keys are on
// both nodes for now), for as long as ctx lasts and at most maxTryAgain in
// all (tryAgainBackoff): a slot's keys move a few at a time. Retries off
// (0) turn both off.
func (s *Store) run(ctx context.Context, keys, hdr []string, retry bool, args ...string) (rueidis.RedisMessage, error) {
	lost, again, waited := 0, 0, time.Duration(0)
	for {
		msg, err := s.writes.Do(ctx, keys, hdr, args...)
		if err == nil || s.retries == 0 || ctx.Err() != nil || !resend(err, retry) {
			return msg, err
		}
		var wait time.Duration
		if isTryAgain(err) {
			if waited >= maxTryAgain {
				return msg, err
			}
			wait, again = tryAgainBackoff(again), again+1
		} else {
			if lost >= s.retries {
				return msg, err
			}
			wait, lost = retryBackoff(lost), lost+1
		}
		waited += wait
		select {
		case <-ctx.Done():
			return msg, err
		case <-time.After(wait):
		}
	}
}

// read runs one read (a sum) through the batcher of reads, resent after
// TRYAGAIN as run resends a write (a read is always safe to resend).
func (s *Store) read(ctx context.Context, keys, hdr []string, args ...string) (rueidis.RedisMessage, error) {
	again, waited := 0, time.Duration(0)
	for {
		msg, err := s.reads.Do(ctx, keys, hdr, args...)
		if err == nil || s.retries == 0 || ctx.Err() != nil || !isTryAgain(err) || waited >= maxTryAgain {
			return msg, err
		}
		wait := tryAgainBackoff(again)
		again, waited = again+1, waited+wait
		select {
		case <-ctx.Done():
			return msg, err
		case <-time.After(wait):
		}
	}
}

// readMany is the batcher of reads' Many: one read per entry of keys, each
// resent after TRYAGAIN as read resends it.
func (s *Store) readMany(ctx context.Context, keys [][]string, hdr []string, args ...string) []*batch.Op {
	ops := s.reads.Many(ctx, keys, hdr, args...)
	again, waited := 0, time.Duration(0)
	for s.retries > 0 && ctx.Err() == nil && waited < maxTryAgain {
		var idx []int
		for i, o := range ops {
			if o.Err != nil && isTryAgain(o.Err) {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			break
		}
		wait := tryAgainBackoff(again)
		again, waited = again+1, waited+wait
		select {
		case <-ctx.Done():
			return ops
		case <-time.After(wait):
		}
		sub := make([][]string, len(idx))
		for j, i := range idx {
			sub[j] = keys[i]
		}
		for j, o := range s.reads.Many(ctx, sub, hdr, args...) {
			ops[idx[j]] = o
		}
	}
	return ops
}

// isTryAgain reports whether err is the server's TRYAGAIN: nothing ran.
func isTryAgain(err error) bool {
	code, _ := backend.ReplyCode(err)
	return code == "TRYAGAIN"
}

// maxTryAgain bounds the time a write keeps being resent after TRYAGAIN.
const maxTryAgain = 5 * time.Second

// tryAgainBackoff is the wait before resending after the attempt-th
// TRYAGAIN: 10 ms, doubling, at most 100 ms.
func tryAgainBackoff(attempt int) time.Duration {
	return min(time.Duration(10<<min(attempt, 4))*time.Millisecond, 100*time.Millisecond)
}

// resend reports whether a write that failed with err is sent again: after
// TRYAGAIN, which says that nothing ran (a cluster slot is moving), and,
// with retry (an event id makes it safe), after a lost reply.
func resend(err error, retry bool) bool {
	if isTryAgain(err) {
		return true
	}
	return retry && backend.Classify(err) == backend.Lost
}

// retryBackoff is the wait before resending after the attempt-th failure:
// 10 ms, doubling, at most maxBackoff. Uncapped, the twelfth wait was 40 s
// and the twentieth three hours: a connection that broke a dozen times in a
// row parked its write past any deadline.
func retryBackoff(attempt int) time.Duration {
	if attempt >= 7 {
		return maxBackoff
	}
	return min(time.Duration(10<<attempt)*time.Millisecond, maxBackoff)
}

// maxBackoff caps the wait between two sends of a write with an event id.
const maxBackoff = 500 * time.Millisecond

// maxTiers bounds the windows of one counter: its Window and WithTiers's.
const maxTiers = 8

func makePlan(b Batch) (*plan, error) {
	bad := func(format string, a ...any) error {
		key := ""
		if len(b.Ops) > 0 {
			key = b.Ops[0].Key
		}
		return invalid("apply", key, fmt.Sprintf(format, a...))
	}
	if len(b.Ops) == 0 {
		return nil, bad("a batch needs at least one op")
	}
	p := &plan{st: b.Ops[0].Store, ops: make([]Op, len(b.Ops)), retry: b.ID != ""}
	if p.st == nil {
		return nil, bad("op 0 has no store")
	}
	copy(p.ops, b.Ops)
	// A batch of Acquires and Refreshes only is safe to send again after a
	// lost reply, as one with an event id: a lease id held is only refreshed.
	leasesOnly := true
	for i := range p.ops {
		o := &p.ops[i]
		if o.Kind == Count && o.NoSum {
			o.Kind = countQuiet
		}
		if o.Kind == Acquire && o.Lease == "" {
			o.Lease = newLeaseID()
		}
		if o.Kind != Acquire && o.Kind != Refresh {
			leasesOnly = false
		}
		if o.Store != nil && !isLease(o.Kind) {
			t, err := o.Store.overTier()
			if err != nil {
				return nil, bad("op %d: %s", i, err)
			}
			o.tier = t
		}
	}
	p.retry = p.retry || leasesOnly
	type counter struct{ limited, counted bool }
	counters := map[string]*counter{} // by the counter's primary Redis key
	limitedTiers := map[string]bool{}
	leases := map[string]bool{} // by the leases' Redis key
	stats := map[string]bool{}  // by the statistics' Redis keys
	var slot uint16
	var ttl int64
	var items [][]string // per item: kind, shape, args
	var keys []string
	for i, o := range p.ops {
		st := o.Store
		switch {
		case st == nil:
			return nil, bad("op %d has no store", i)
		case st.client != p.st.client:
			return nil, bad("op %d uses another client", i)
		case st.be != p.st.be:
			return nil, bad("op %d uses another backend", i)
		case !sameInstant(st.at, p.st.at):
			return nil, bad("op %d is at another instant than op 0 (see Store.At)", i)
		}
		rk, err := st.redisKey(o.Key, st.tiers[0].tag)
		if err != nil {
			return nil, rename(err, "apply")
		}
		if i == 0 {
			slot = keyspace.Slot(rk)
		} else if keyspace.Slot(rk) != slot {
			return nil, bad("op %d is in another cluster slot than op 0: a batch's counters must share one (one key, or one Entity)", i)
		}
		c := counters[rk]
		if c == nil {
			c = &counter{}
			counters[rk] = c
		}
		for _, t := range st.tiers {
			ttl = max(ttl, t.winMs+t.bucketMs)
		}
		if isStat(o) {
			its, ks, names, err := observeItems(o)
			if err != nil {
				return nil, bad("op %d: %s", i, err)
			}
			for j, it := range its {
				if stats[names[j]] {
					return nil, bad("op %d: statistic %v of %q is in the batch twice", i, o.Stat, o.Key)
				}
				stats[names[j]] = true
				if p.first == "" {
					p.first = names[j]
				}
				items, keys = append(items, it), append(keys, ks[j]...)
				p.items = append(p.items, planItem{op: i, kind: it[0], count: j == 1})
			}
			continue
		}
		if isLease(o.Kind) {
			if err := checkLease(o); err != nil {
				return nil, bad("op %d: %s", i, err)
			}
			lk, _ := st.redisKey(o.Key, leaseTag)
			if leases[lk] {
				return nil, bad("op %d: the leases of %q are in the batch twice", i, o.Key)
			}
			leases[lk] = true
			if p.first == "" {
				p.first = lk
			}
			kind := leaseItem(o.Kind)
			items = append(items, []string{kind, strconv.FormatInt(o.Limit, 10), strconv.FormatInt(o.TTL.Milliseconds(), 10), o.Lease})
			keys = append(keys, lk)
			p.items = append(p.items, planItem{op: i, kind: kind})
			ttl = max(ttl, o.TTL.Milliseconds())
			continue
		}
		switch o.Kind {
		case Count, countQuiet, Distinct, Read:
			if c.counted || c.limited {
				return nil, bad("op %d: counter %q is in the batch twice", i, o.Key)
			}
			c.counted = true
		case Limit:
			if c.counted {
				return nil, bad("op %d: counter %q is counted and limited in one batch", i, o.Key)
			}
			c.limited = true
			if o.Limit < 0 || o.Limit > maxExact || o.Delta < 0 || o.Delta > maxExact {
				return nil, bad("op %d: limit %d and cost %d must be within [0, 2^53]", i, o.Limit, o.Delta)
			}
			tk := rk + "#" + strconv.Itoa(o.tier)
			if limitedTiers[tk] {
				return nil, bad("op %d: window %v of counter %q is limited twice", i, st.tiers[o.tier].win, o.Key)
			}
			limitedTiers[tk] = true
		default:
			return nil, bad("op %d: unknown kind %d", i, o.Kind)
		}
		d := strconv.FormatInt(o.Delta, 10)
		for ti, t := range st.tiers {
			trk, _ := st.redisKey(o.Key, t.tag)
			var it []string
			switch o.Kind {
			case Count:
				it = []string{backend.ItemCount, t.shape, d}
			case countQuiet:
				it = []string{backend.ItemQuiet, t.shape, d}
			case Distinct:
				it = append([]string{backend.ItemDistinct, t.shape, strconv.Itoa(len(o.Members))}, o.Members...)
			case Read:
				it = []string{backend.ItemRead, t.shape}
			case Limit:
				if ti != o.tier {
					continue // added below, once per counter
				}
				it = []string{backend.ItemLimit, t.shape, strconv.FormatInt(o.Limit, 10), d}
			}
			items = append(items, it)
			if p.first == "" {
				p.first = trk
				if o.Kind == Distinct {
					p.first = trk + ":d" // its first key (distinctKeys)
				}
			}
			if o.Kind == Distinct {
				if err := checkDistinct("apply", o.Key, t, st.futureMs); err != nil {
					return nil, err
				}
				keys = append(keys, distinctKeys(trk, t, st.futureMs)...)
			} else {
				keys = append(keys, st.counterKeys(trk, t.tag)...)
			}
			p.items = append(p.items, planItem{op: i, tier: ti, kind: it[0]})
		}
	}
	// The tiers of a limited counter that no limit names count the cost when
	// the limits admit it.
	for i, o := range p.ops {
		if o.Kind != Limit {
			continue
		}
		rk, _ := o.Store.redisKey(o.Key, o.Store.tiers[0].tag)
		for ti, t := range o.Store.tiers {
			tk := rk + "#" + strconv.Itoa(ti)
			if limitedTiers[tk] {
				continue
			}
			limitedTiers[tk] = true
			trk, _ := o.Store.redisKey(o.Key, t.tag)
			items = append(items, []string{backend.ItemIfOK, t.shape, strconv.FormatInt(o.Delta, 10)})
			keys = append(keys, o.Store.counterKeys(trk, t.tag)...)
			p.items = append(p.items, planItem{op: i, tier: ti, kind: backend.ItemIfOK})
		}
	}
	if len(items) > 1000 {
		return nil, bad("a batch of %d counters: at most 1000", len(items))
	}
	p.args = []string{backend.OpGroup, strconv.Itoa(len(items)), b.ID, strconv.FormatInt(ttl, 10), ""}
	if b.ID != "" {
		p.keys = append(p.keys, idKey(p.first, b.ID))
	}
	if !b.Time.IsZero() {
		p.args[4] = strconv.FormatInt(b.Time.UnixMilli(), 10)
	}
	p.keys = append(p.keys, keys...)
	for _, it := range items {
		p.args = append(p.args, it...)
	}
	return p, nil
}

// idKey is the key of event id id of a batch whose first counter's Redis key
// (redisKey) is first.
func idKey(first, id string) string {
	var k strings.Builder
	k.WriteString(first)
	k.WriteString(":id:")
	keyspace.Escape(&k, id)
	return k.String()
}

// distinctKeys are the keys of the distinct count of tier t of the counter
// whose Redis key is rk, in the order the scripts take them (ws_dk in
// internal/backend/lua/distinct.lua): rk + ":d", a hash of which bucket each
// ring key holds; rk + ":d:u", the union of the live buckets; and the ring,
// rk + ":d:r0", ":d:r1", ..., one HyperLogLog per bucket (distinctRing keys).
// Every key a script touches is declared: during a slot migration a key the
// script named itself may already be on the other node. The ring's
// keys that hold nothing never exist, so while the slot migrates the cluster
// refuses the call before it runs (TRYAGAIN, resent by the store), and never
// runs it on a node that does not hold every key.
func distinctKeys(rk string, t tier, futureMs int64) []string {
	d := rk + ":d"
	n := distinctRing(t, futureMs)
	keys := make([]string, 0, n+2)
	keys = append(keys, d, d+":u")
	for j := range n {
		keys = append(keys, d+":r"+strconv.Itoa(j))
	}
	return keys
}

// maxDistinctRing bounds the ring keys of a distinct count: a count over the
// ring is PFCOUNT of its live keys, which Lua's unpack cannot pass past some
// 8,000 (and every call declares the whole ring). A window of up to 3,948
// buckets fits whatever the future tolerance (the ring is at most 2n + 3).
const maxDistinctRing = 7900

// checkDistinct refuses a distinct count on a tier whose ring would be
// longer than maxDistinctRing.
func checkDistinct(op, key string, t tier, futureMs int64) error {
	if n := distinctRing(t, futureMs); n > maxDistinctRing {
		return invalid(op, key, fmt.Sprintf("a distinct count keeps a HyperLogLog per bucket: window %v needs %d keys, "+
			"at most %d: use longer buckets (or tiers)", t.win, n, maxDistinctRing))
	}
	return nil
}

// distinctRing is the number of ring keys of a distinct count of tier t
// with a future tolerance of futureMs (ws_dring in distinct.lua): the
// window's n buckets rounded up, one more for a year's short last bucket, one
// for the next bucket and one ahead, and one per bucket of the tolerance (at
// most n), for clients whose clocks are ahead.
func distinctRing(t tier, futureMs int64) int {
	ceil := func(a, b int64) int64 { return (a + b - 1) / b }
	n := ceil(t.winMs, t.bucketMs)
	return int(n + 3 + min(ceil(futureMs, t.bucketMs), n))
}

// result reads a group's reply into a BatchResult.
func (p *plan) result(msg rueidis.RedisMessage) (BatchResult, error) {
	v, err := msg.ToArray()
	if err == nil && p.compacted && len(v) == 1+2*len(p.items) && !v[2].IsArray() {
		return p.compactResult(v)
	}
	if err != nil || len(v) != 2+len(p.items) {
		return BatchResult{}, errors.New("unexpected group reply " + msg.String())
	}
	flags, err1 := v[0].AsInt64()
	retry, err2 := v[1].AsInt64()
	if err := errors.Join(err1, err2); err != nil {
		return BatchResult{}, errors.New("unexpected group reply " + msg.String())
	}
	r := BatchResult{Allowed: flags&1 == 1, Duplicate: flags&2 == 2, RefusedBy: -1, RetryAfter: ms(retry),
		Values: make([]Value, len(p.ops))}
	for i, o := range p.ops {
		r.Values[i].Counted = !r.Duplicate && (o.Kind != Limit || r.Allowed) && o.Kind != Read &&
			(o.Kind != Distinct || len(o.Members) > 0)
		if o.Kind == Acquire {
			r.Values[i].Lease = o.Lease
		}
		if isLease(o.Kind) || isStat(o) {
			continue // see below
		}
		if o.Kind != Limit {
			r.Values[i].Sums = make([]int64, len(o.Store.tiers))
			r.Values[i].CountedTiers = make([]bool, len(o.Store.tiers))
			for t := range r.Values[i].CountedTiers {
				r.Values[i].CountedTiers[t] = r.Values[i].Counted
			}
		}
	}
	for j, it := range p.items {
		a := v[2+j]
		val := &r.Values[it.op]
		o := p.ops[it.op]
		if isLease(o.Kind) {
			if err := val.leaseAnswer(a, o, r.Duplicate); err != nil {
				return r, err
			}
			continue
		}
		if isStat(o) {
			if err := val.statAnswer(a, it, o.Stat); err != nil {
				return r, err
			}
			continue
		}
		if it.kind != backend.ItemLimit {
			if f, err := a.ToArray(); err == nil { // a late event: this tier's bucket has left the window
				if len(f) != 1 {
					return r, errors.New("unexpected group answer " + a.String())
				}
				a = f[0]
				if val.CountedTiers != nil {
					val.CountedTiers[it.tier] = false
				}
				if it.tier == o.tier {
					val.Counted = false
				}
			}
		}
		switch it.kind {
		case backend.ItemLimit:
			f, err := a.ToArray()
			if err != nil || len(f) != 4 {
				return r, errors.New("unexpected limit answer " + a.String())
			}
			sum, err1 := sumOf(f[0])
			rt, err2 := f[1].AsInt64()
			rs, err3 := f[2].AsInt64()
			refused, err4 := f[3].AsInt64()
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				return r, errors.New("unexpected limit answer " + a.String())
			}
			val.Sum, val.Limit, val.Remaining = sum, o.Limit, remaining(o.Limit, sum)
			val.RetryAfter, val.ResetAfter, val.Refused = ms(rt), ms(rs), refused == 1
		default:
			n, err := sumOf(a)
			if err != nil {
				return r, err
			}
			if val.Sums != nil {
				val.Sums[it.tier] = n
			}
			if it.tier == o.tier {
				val.Sum = n
			}
		}
	}
	if !r.Allowed {
		// The limit that decides: the refusing one whose wait is the longest
		// (never: -1). A duplicate's refusing limits are those of its first
		// call, with their waits from now.
		var worst time.Duration
		for i, o := range p.ops {
			ra := r.Values[i].RetryAfter
			if (o.Kind != Limit && o.Kind != Acquire) || !r.Values[i].Refused {
				continue
			}
			if r.RefusedBy < 0 || ra < 0 || (worst >= 0 && ra > worst) {
				r.RefusedBy, worst = i, ra
			}
		}
	}
	return r, nil
}

// compactResult reads the answer of a compact group of limits (see compact)
// that every limit admitted on its fast path: {1, sum, reset, sum, reset...}.
func (p *plan) compactResult(v []rueidis.RedisMessage) (BatchResult, error) {
	r := BatchResult{Allowed: true, RefusedBy: -1, Values: make([]Value, len(p.ops))}
	if f, err := v[0].AsInt64(); err != nil || f != 1 {
		return r, errors.New("unexpected limits reply " + fmt.Sprint(v))
	}
	for j, it := range p.items {
		sum, err1 := sumOf(v[1+2*j])
		rs, err2 := v[2+2*j].AsInt64()
		if err := errors.Join(err1, err2); err != nil {
			return r, errors.New("unexpected limits reply " + fmt.Sprint(v))
		}
		o := p.ops[it.op]
		r.Values[it.op] = Value{Counted: true, Sum: sum, Limit: o.Limit, Remaining: remaining(o.Limit, sum), ResetAfter: ms(rs)}
	}
	return r, nil
}

func ms(v int64) time.Duration {
	if v < 0 {
		return -1
	}
	return time.Duration(v) * time.Millisecond
}

// sameInstant reports whether two At views' instants are the same (nil: the
// store's clock).
func sameInstant(a, b *time.Time) bool {
	return a == b || (a != nil && b != nil && a.Equal(*b))
}
