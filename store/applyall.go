package store

import (
	"context"
	"fmt"

	"github.com/windowstore/windowstore/internal/engine"
)

// ApplyAll runs the batches as one event: the limits of every batch (its
// Limit and Acquire ops) admit together or not at all, and an error anywhere
// writes nothing anywhere. The costs count, and the leases are taken, only
// if every limit of every batch admits; a refusal anywhere counts no limit's
// cost. A batch's other ops (Count, Distinct, Observe, Refresh, Release)
// write whatever the decision, as within one batch. ApplyAll is for
// decisions across entities and cluster slots, such as a login limited per
// user, per IP and per device at once (features.Set.Record, AllowAll).
//
// Every batch is checked before anything is written: an overflow, a key of
// another type, an event beyond the future tolerance in any batch fails the
// whole event, and no key of any batch changes. A late event counts in the
// batches whose windows still cover its time (Value.Counted false where
// not); when no op of any batch can count it, ApplyAll fails with ErrTooOld.
// An error's *ManyError has one entry per batch, nil but for the batch that
// failed, and it says so when the event wrote nothing (which is every error
// but the rare one of a cluster's reservation below).
//
// On a server that is not a cluster the batches run in one script call. On
// a cluster, a call checks every slot's batch (nothing written), then each
// slot's batch is a reservation: it is decided and counted as usual, and
// when another refuses, it is taken back by a third call. Between the two,
// other callers see the reserved cost: it may refuse them, never admit more
// than a limit. A reservation whose undo never arrives (the process died, or
// the undo failed past the store's retries, reported as an error) stays
// counted as an admitted cost until its bucket leaves the window: never an
// over-admission, and never for longer than the window. A reservation that
// fails after the checks passed (the server's memory full in between, a lost
// reply) takes the others back, and its error says that the event's other
// batches were written.
//
// An Acquire taken back releases its lease: one whose id was already held
// before the decision (a refresh) is ended too.
//
// A refused decision's results are marked: each batch is Allowed false; a
// batch that admitted on its own keeps RefusedBy -1 and RetryAfter 0, and its
// Limit and Acquire values are reported without the cost (Counted false). A
// retried event (the same Batch IDs) answers Duplicate in each batch that
// saw it, with that batch's first decision, and writes nothing there; a
// duplicate batch never takes part in a refusal's undo. When the first
// decision was refused, the event is decided anew, unless a batch also made
// unconditional writes: that batch keeps its id, so that they count once,
// and the event stays refused. A batch that breaks the rules fails the whole
// call with ErrInvalid before anything is sent.
func ApplyAll(ctx context.Context, batches ...Batch) (_ []BatchResult, err error) {
	ctx, end := observe(ctx, batches, "apply")
	defer func() { end(err) }()
	return applyAll(ctx, batches)
}

func applyAll(ctx context.Context, batches []Batch) ([]BatchResult, error) {
	ps := make([]*plan, len(batches))
	for i, b := range batches {
		p, err := makePlan(b)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	if err := distinctCounters(ps); err != nil {
		return nil, err
	}
	hdr := joinable(ps)
	parts := make([]engine.Part, len(ps))
	for i, p := range ps {
		h := hdr
		if h == nil {
			h = p.st.header()
		}
		parts[i] = p.part(h)
	}
	replies, err := engine.Run(ctx, parts, hdr != nil)
	if err != nil {
		return nil, eventError(batches, ps, err)
	}
	out := make([]BatchResult, len(ps))
	late, writes := true, false
	for i, p := range ps {
		if out[i], err = p.result(replies[i]); err != nil {
			return nil, eventError(batches, ps, &engine.Error{Part: i, Err: err, Written: true})
		}
		if replies[i].Duplicate() || p.decides() || (p.group.Writes && !replies[i].Late()) {
			late = false
		}
		writes = writes || p.group.Writes
	}
	if late && writes {
		for i, p := range ps {
			if p.group.Writes {
				errs := make([]error, len(batches))
				errs[i] = tooOld(batches[i].Ops[0].Key)
				return nil, &ManyError{Errs: errs, event: true}
			}
		}
	}
	return out, nil
}

// distinctCounters refuses an event whose batches share a counter: each
// counter is opened once, before any of the event's writes.
func distinctCounters(ps []*plan) error {
	if len(ps) < 2 {
		return nil
	}
	seen := map[string]int{}
	for i, p := range ps {
		for _, k := range p.names {
			if j, ok := seen[k]; ok && j != i {
				return invalid("apply", p.ops[0].Key, fmt.Sprintf("batches %d and %d of one event share the counter %s", j, i, k))
			}
			seen[k] = i
		}
	}
	return nil
}
