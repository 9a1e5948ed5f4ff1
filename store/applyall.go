package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
)

// ApplyAll runs the batches as one decision: like Apply, except that the
// limits of every batch (its Limit and Acquire ops) admit together or not at
// all. The costs count, and the leases are taken, only if every limit of
// every batch admits; a refusal anywhere, or a batch that fails, leaves no net
// count of the limits' costs anywhere. A batch's other ops (Count, Distinct,
// Refresh, Release) write whatever the decision, as within one batch.
// Batches of one slot are one batch: ApplyAll is for decisions across
// entities and cluster slots, such as a login limited per user, per IP and
// per device at once (features.Set.Record, AllowAll).
//
// On a server that is not a cluster the batches run in one script call,
// atomically: a refused decision is never seen half made. On a cluster each
// slot's batch is a reservation: it is decided and counted as usual, and
// when another refuses (or fails), it is taken back by a second call, in one
// more round trip. Between the two, other callers see the reserved cost: it
// may refuse them, never admit more than a limit. Each batch needs an event
// id for this; a batch without one gets a random id, kept for
// linkSettle (10 s), so that the second call undoes the reservation exactly once
// (a resent undo does nothing). A reservation whose undo never arrives (the
// process died, or the undo failed past the store's retries, reported as an
// error for its batch) stays counted as an admitted cost until its bucket
// leaves the window: never an over-admission, and never for longer than the
// window.
//
// An Acquire taken back releases its lease: one whose id was already held
// before the decision (a refresh) is ended too.
//
// A refused decision's results are marked: each batch is Allowed false;
// a batch that admitted on its own keeps RefusedBy -1 and RetryAfter 0, and
// its Limit and Acquire values are reported with the cost taken back
// (Counted false). A retried event (the same Batch IDs) answers Duplicate
// with the first decision when it was admitted. When it was refused, it is
// decided anew, unless a batch also made unconditional writes: that batch
// keeps its id, so that they count once, and the event stays refused. The
// result's error is a *ManyError, as Apply's; a batch that breaks the rules
// fails the whole call with ErrInvalid before anything is sent. A batch
// without limits runs as in Apply, whatever the decision.
func ApplyAll(ctx context.Context, batches ...Batch) (_ []BatchResult, err error) {
	ctx, end := observe(ctx, batches, "apply")
	defer func() { end(err) }()
	return applyAll(ctx, batches)
}

// linkSettle is how long the reservation of a batch without an event id is
// kept, in a decision of ApplyAll across cluster slots, for its undo to find:
// an undo that comes later (past the store's retries) does nothing, and the
// cost stays counted until its bucket leaves the window.
const linkSettle = 10 * time.Second

func applyAll(ctx context.Context, batches []Batch) ([]BatchResult, error) {
	// With the limits in one batch at most, its script decides alone, and
	// the other batches write whatever the decision: as Apply.
	decides := make([]bool, len(batches)) // the batch has a limit
	n := 0
	for i, b := range batches {
		if decides[i] = slices.ContainsFunc(b.Ops, func(o Op) bool { return o.Kind == Limit || o.Kind == Acquire }); decides[i] {
			n++
		}
	}
	if n < 2 {
		return apply(ctx, batches)
	}
	ps := make([]*plan, len(batches))
	for i, b := range batches {
		p, err := makePlan(b)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	out := make([]BatchResult, len(ps))
	errs := make([]error, len(ps))
	failed := func(i int, err error) {
		errs[i] = fail("apply", batches[i].Ops[0].Key, ps[i].st.be.Write, err)
	}
	if hdr := joinable(ps); hdr != nil {
		// One server: every group in one script call, linked there.
		args := []string{backend.OpLink, strconv.Itoa(len(ps))}
		var keys []string
		retry := true
		for _, p := range ps {
			args = append(args, p.args[1:]...)
			keys = append(keys, p.keys...)
			retry = retry && p.retry
		}
		msg, err := ps[0].st.run(ctx, keys, hdr, retry, args...)
		var replies []rueidis.RedisMessage
		if err == nil {
			if replies, err = msg.ToArray(); err == nil && len(replies) != len(ps) {
				err = errors.New("unexpected link reply " + msg.String())
			}
		}
		for i, p := range ps {
			switch {
			case err != nil:
				failed(i, err)
			case replies[i].Error() != nil:
				failed(i, replies[i].Error())
			default:
				if out[i], errs[i] = p.result(replies[i]); errs[i] != nil {
					failed(i, errs[i])
				}
			}
		}
		if !settled(out, errs) {
			for i, p := range ps {
				if decides[i] && errs[i] == nil && out[i].Allowed {
					out[i].undone(p) // in the same call
				}
			}
		}
		return out, many(errs)
	}
	// A cluster: reserve in every slot at once, then undo where needed. A
	// batch without limits runs as in Apply: it has nothing to take back.
	id := ""
	for i, p := range ps {
		if decides[i] && p.args[2] == "" {
			if id == "" {
				id = "~" + newLeaseID() // random; "~" keeps it apart from callers' ids
			}
			p.setID(id, linkSettle)
		}
	}
	// each sends op (with each plan's arguments) for the plans that which
	// picks, all at once, and hands do each reply.
	each := func(op func(i int) string, which func(i int) bool, do func(i int, msg rueidis.RedisMessage, err error)) {
		done := make(chan struct{})
		n := 0
		for i, p := range ps {
			if !which(i) {
				continue
			}
			n++
			go func() {
				msg, err := p.st.run(ctx, p.keys, p.st.header(), p.retry, append([]string{op(i)}, p.args[1:]...)...)
				do(i, msg, err)
				done <- struct{}{}
			}()
		}
		for range n {
			<-done
		}
	}
	each(func(i int) string {
		if decides[i] {
			return backend.OpReserve
		}
		return backend.OpGroup
	}, func(int) bool { return true }, func(i int, msg rueidis.RedisMessage, err error) {
		if err == nil {
			out[i], err = ps[i].result(msg)
		}
		if err != nil {
			failed(i, err)
		}
	})
	if settled(out, errs) {
		return out, nil
	}
	// Undo every reservation that may have been made: the admitted batches',
	// and the failed ones' (whose reply may have been lost; an undo of a
	// batch that reserved nothing does nothing).
	each(func(int) string { return backend.OpUndo }, func(i int) bool {
		return decides[i] && (errs[i] != nil || out[i].Allowed)
	}, func(i int, _ rueidis.RedisMessage, err error) {
		if err != nil && errs[i] == nil {
			failed(i, fmt.Errorf("the refused decision's undo failed (its cost stays counted until its bucket leaves the window): %w", err))
		}
	})
	for i, p := range ps {
		if decides[i] && errs[i] == nil && out[i].Allowed {
			out[i].undone(p)
		}
	}
	return out, many(errs)
}

// settled reports whether a linked decision stands as its batches made it:
// every batch ran and admitted.
func settled(out []BatchResult, errs []error) bool {
	for i := range out {
		if errs[i] != nil || !out[i].Allowed {
			return false
		}
	}
	return true
}

// setID gives the plan an event id, kept for ttl, as makePlan does for a
// Batch.ID.
func (p *plan) setID(id string, ttl time.Duration) {
	p.args[2], p.args[3] = id, strconv.FormatInt(ttl.Milliseconds(), 10)
	p.keys = append([]string{idKey(p.first, id)}, p.keys...)
	p.retry = true
}

// undone marks the result of an admitted batch whose decision was refused by
// another batch: its limits' costs and its leases were taken back.
func (r *BatchResult) undone(p *plan) {
	r.Allowed = false
	for i, o := range p.ops {
		v := &r.Values[i]
		switch o.Kind {
		case Limit:
			v.Sum -= o.Delta
			v.Remaining, v.Counted = remaining(o.Limit, v.Sum), false
		case Acquire:
			v.Sum = max(v.Sum-1, 0)
			v.Remaining, v.Counted = remaining(o.Limit, v.Sum), false
		}
	}
}
