package store

import (
	"errors"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/engine"
)

// result reads a group's reply into a BatchResult: the last stage.
func (p *plan) result(g engine.Reply) (BatchResult, error) {
	r := BatchResult{Allowed: g.Allowed(), Duplicate: g.Duplicate(), RefusedBy: -1, RetryAfter: ms(g.Retry),
		Values: make([]Value, len(p.ops))}
	if g.Undone() {
		r.RetryAfter = 0
	}
	for i, o := range p.ops {
		r.Values[i].Counted = !r.Duplicate && (o.Kind != OpLimit || r.Allowed) && o.Kind != OpRead &&
			(o.Kind != OpDistinct || len(o.Members) > 0)
		if o.Kind == OpAcquire {
			r.Values[i].Lease = o.Lease
		}
		if isLease(o.Kind) || isStat(o) {
			continue // see below
		}
		if o.Kind != OpLimit {
			r.Values[i].Sums = make([]int64, len(o.Store.tiers))
			r.Values[i].CountedTiers = make([]bool, len(o.Store.tiers))
			for t := range r.Values[i].CountedTiers {
				r.Values[i].CountedTiers[t] = r.Values[i].Counted
			}
		}
	}
	for j, it := range p.items {
		a := g.Answers[j]
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
		if a.Late { // a late event: this tier's bucket has left the window
			if val.CountedTiers != nil {
				val.CountedTiers[it.tier] = false
			}
			if it.tier == o.tier {
				val.Counted = false
			}
		}
		switch it.kind {
		case backend.ItemLimit:
			// sum, retry, reset, refused; or, from the plain hash's fast
			// path, an admitted limit's sum and reset alone.
			f := a.Vals
			if len(f) != 4 && len(f) != 2 {
				return r, errors.New("unexpected limit answer")
			}
			sum, err1 := sumOf(f[0])
			var rt, rs, refused int64
			var err2, err3, err4 error
			if len(f) == 2 {
				rs, err3 = f[1].AsInt64()
			} else {
				rt, err2 = f[1].AsInt64()
				rs, err3 = f[2].AsInt64()
				refused, err4 = f[3].AsInt64()
			}
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				return r, errors.New("unexpected limit answer")
			}
			val.Sum, val.Limit, val.Remaining = sum, o.Limit, remaining(o.Limit, sum)
			val.RetryAfter, val.ResetAfter, val.Refused = ms(rt), ms(rs), refused == 1
		default:
			if len(a.Vals) != 1 {
				return r, errors.New("unexpected group answer")
			}
			n, err := sumOf(a.Vals[0])
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
			if (o.Kind != OpLimit && o.Kind != OpAcquire) || !r.Values[i].Refused {
				continue
			}
			if r.RefusedBy < 0 || ra < 0 || (worst >= 0 && ra > worst) {
				r.RefusedBy, worst = i, ra
			}
		}
	}
	if g.Undone() {
		r.undone(p)
	}
	return r, nil
}

// undone marks the result of a batch admitted on its own whose decision
// another batch refused, on a cluster (a reservation taken back): its
// limits' costs and its leases were taken back.
func (r *BatchResult) undone(p *plan) {
	r.Allowed = false
	for i, o := range p.ops {
		v := &r.Values[i]
		switch o.Kind {
		case OpLimit:
			v.Sum -= o.Delta
			v.Remaining, v.Counted = remaining(o.Limit, v.Sum), false
		case OpAcquire:
			v.Sum = max(v.Sum-1, 0)
			v.Remaining, v.Counted = remaining(o.Limit, v.Sum), false
		}
	}
}

func ms(v int64) time.Duration {
	if v < 0 {
		return -1
	}
	return time.Duration(v) * time.Millisecond
}
