package store

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Sum returns the window sum of key; 0 for a key that does not exist. It is a
// read-only script: it writes nothing (stale buckets are left to the next
// write), so a replica can serve it. Being read-only, rueidis retries it on
// connection errors until ctx ends: give it a deadline.
func (s *Store) Sum(ctx context.Context, key string) (int64, error) {
	if s.over != 0 {
		return s.sumOver(ctx, key, s.over)
	}
	return s.sum(ctx, key, s.winMs)
}

func (s *Store) sum(ctx context.Context, key string, lookback int64) (n int64, err error) {
	ctx, end := s.start(ctx, "sum")
	defer func() { end(err) }()
	rk, err := s.redisKey(key, s.tag)
	if err != nil {
		return 0, rename(err, "sum")
	}
	msg, err := s.read(ctx, s.counterKeys(rk, s.tag), s.header(), s.shape, strconv.FormatInt(lookback, 10))
	if err != nil {
		return 0, fail("sum", key, s.be.Sum, err)
	}
	n, err = sumOf(msg)
	return n, fail("sum", key, nil, err)
}

// ManyError is the error of a call on several keys or batches when some of
// them fail: SumMany, ReadStatMany and Apply.
type ManyError struct {
	// Errs has one entry per key (SumMany, ReadStatMany) or batch
	// (Apply, ApplyAll), in order: nil where it succeeded, else why not. Of
	// ApplyAll's, one event, only the batch that failed has an error.
	Errs []error

	event bool // ApplyAll's: its one error is the event's
}

func (e *ManyError) Error() string {
	if e.event {
		for _, err := range e.Errs {
			if err != nil {
				return err.Error()
			}
		}
	}
	var msgs []string
	for _, err := range e.Errs {
		if err != nil {
			msgs = append(msgs, strings.TrimPrefix(err.Error(), "store: "))
		}
	}
	return "store: " + strconv.Itoa(len(msgs)) + " of " + strconv.Itoa(len(e.Errs)) + " keys failed: " + strings.Join(msgs, "; ")
}

// Unwrap returns the keys' errors, so that errors.Is and errors.As see them.
func (e *ManyError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// SumMany returns the window sums of many keys, in the order given, in one
// round trip: one read-only script call (per 1,024 keys), on a cluster one
// per slot, pipelined per node. If some
// keys fail, the others' sums are still returned and the error is a
// *ManyError that says which keys failed; errors.Is sees each key's error.
func (s *Store) SumMany(ctx context.Context, keys []string) (_ []int64, err error) {
	ctx, end := s.start(ctx, "sum many")
	defer func() { end(err) }()
	out := make([]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	t, lookback, err := s.span("sum many", keys[0])
	if err != nil {
		return nil, err
	}
	rks := make([][]string, 0, len(keys))
	idx := make([]int, 0, len(keys))
	errs := make([]error, len(keys))
	failed := false
	for i, k := range keys {
		rk, err := s.redisKey(k, t.tag)
		if err != nil {
			errs[i], failed = rename(err, "sum"), true
			continue
		}
		rks = append(rks, s.counterKeys(rk, t.tag))
		idx = append(idx, i)
	}
	if len(rks) > 0 {
		lb := strconv.FormatInt(lookback, 10)
		for j, o := range s.readMany(ctx, rks, s.header(), t.shape, lb) {
			err := o.Err
			if err == nil {
				out[idx[j]], err = sumOf(o.Res)
				err = fail("sum", keys[idx[j]], nil, err)
			} else {
				err = fail("sum", keys[idx[j]], s.be.Sum, err)
			}
			if err != nil {
				errs[idx[j]], failed = err, true
			}
		}
	}
	if failed {
		return out, &ManyError{Errs: errs}
	}
	return out, nil
}

func (s *Store) sumOver(ctx context.Context, key string, d time.Duration) (_ int64, err error) {
	ctx, end := s.start(ctx, "sum")
	defer func() { end(err) }()
	t, err := s.tierFor(key, d)
	if err != nil {
		return 0, err
	}
	rk, err := s.redisKey(key, t.tag)
	if err != nil {
		return 0, rename(err, "sum")
	}
	msg, err := s.read(ctx, s.counterKeys(rk, t.tag), s.header(), t.shape, strconv.FormatInt(d.Milliseconds(), 10))
	if err != nil {
		return 0, fail("sum", key, s.be.Sum, err)
	}
	n, err := sumOf(msg)
	return n, fail("sum", key, nil, err)
}

// span is the tier and the lookback (ms) that the view reads: an Over view's,
// or else the whole Window.
func (s *Store) span(op, key string) (tier, int64, error) {
	if s.over == 0 {
		return s.tiers[0], s.winMs, nil
	}
	t, err := s.tierFor(key, s.over)
	if err != nil {
		return tier{}, 0, rename(err, op)
	}
	return t, s.over.Milliseconds(), nil
}

// tierFor picks the finest tier whose window reaches d and whose bucket
// divides it.
func (s *Store) tierFor(key string, d time.Duration) (tier, error) {
	var best *tier
	for i := range s.tiers {
		t := &s.tiers[i]
		if d >= t.win.Bucket && d <= t.win.Length && d%t.win.Bucket == 0 && (best == nil || t.win.Bucket < best.win.Bucket) {
			best = t
		}
	}
	if best == nil {
		var ws []string
		for _, t := range s.tiers {
			ws = append(ws, t.win.String())
		}
		return tier{}, invalid("sum", key, "no window of the store ("+strings.Join(ws, ", ")+") answers "+d.String()+
			" exactly: it must reach it, and its bucket divide it")
	}
	return *best, nil
}

// many is a *ManyError of errs, or nil when every entry is nil.
func many(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &ManyError{Errs: errs}
		}
	}
	return nil
}
