package store

import (
	"context"
	"strconv"

	"github.com/windowstore/windowstore/internal/backend"
)

// Distinct counts: how many different members (cards, accounts, devices) a
// key saw in the window. Each bucket of a key's distinct count is a
// HyperLogLog (PFADD) in a ring of keys; the store also keeps the union of the
// live buckets, so that a count over the window is PFCOUNT of one key, which
// Redis answers from its cached cardinality while the union is unchanged. The
// union is rebuilt once per bucket, by the second add after a bucket leaves
// the window (a count before it merges the live buckets). Its standard error
// is 0.81% (Redis's HyperLogLog), at most 12 KB per bucket whatever the
// number of members; docs/counters.md gives the measured error and memory. The keys of a key's distinct count share its
// slot:
//
//	prefix + "{" + key + "}:" + shape + ":d"          a hash: which bucket each ring key holds
//	                                 ... ":d:u"       the union of the live buckets
//	                                 ... ":d:r0" ...  the ring: n + 3 keys for a window of n
//	                                                  buckets, and more for the future tolerance
//
// Every key a script touches is declared in its KEYS (see distinctKeys).
// PFCOUNT writes (it caches the count), so distinct counts are read by the
// write script, on the primary. Every backend keeps them the same way:
// HyperLogLogs are core Redis.

// AddDistinct adds members to key's distinct count (in every tier of a
// multi-resolution store) and returns the number of distinct members in the
// window. It takes at least one member. Distinct counts keep a HyperLogLog
// per bucket, at most 7,900 (a window of 7,897 buckets with no future
// tolerance, 3,948 whatever the tolerance): on a longer window every
// distinct call fails with ErrInvalid.
func (s *Store) AddDistinct(ctx context.Context, key string, members ...string) (_ int64, err error) {
	ctx, end := s.start(ctx, "add distinct")
	defer func() { end(err) }()
	if len(members) == 0 {
		return 0, invalid("add distinct", key, "no members")
	}
	if len(s.tiers) > 1 {
		res, err := apply(ctx, []Batch{{Ops: []Op{{Store: s, Key: key, Kind: Distinct, Members: members}}}})
		if err != nil {
			return 0, rename(first(err), "add distinct")
		}
		return res[0].Values[0].Sum, nil
	}
	// One window: an operation of its own (the group's distinct item, without
	// the group's machinery).
	rk, err := s.redisKey(key, s.tag)
	if err != nil {
		return 0, rename(err, "add distinct")
	}
	if err := checkDistinct("add distinct", key, s.tiers[0], s.futureMs); err != nil {
		return 0, err
	}
	args := append([]string{backend.OpDAdd, s.shape, strconv.Itoa(len(members))}, members...)
	msg, err := s.run(ctx, distinctKeys(rk, s.tiers[0], s.futureMs), s.header(), false, args...)
	if err != nil {
		return 0, fail("add distinct", key, s.be.Write, err)
	}
	n, err := sumOf(one(msg))
	return n, fail("add distinct", key, nil, err)
}

// CountDistinct returns the number of distinct members key saw in the window.
func (s *Store) CountDistinct(ctx context.Context, key string) (int64, error) {
	n, err := s.CountDistinctMany(ctx, []string{key})
	if err != nil {
		return 0, first(err)
	}
	return n[0], nil
}

// CountDistinctMany returns the distinct counts of many keys over the window,
// in one round trip (per node, in parallel, on a cluster). Failures are
// reported as SumMany reports them.
func (s *Store) CountDistinctMany(ctx context.Context, keys []string) ([]int64, error) {
	if len(keys) == 0 {
		return []int64{}, nil
	}
	t, lookback, err := s.span("count distinct", keys[0])
	if err != nil {
		return nil, err
	}
	if err := checkDistinct("count distinct", keys[0], t, s.futureMs); err != nil {
		return nil, err
	}
	return s.countDistinct(ctx, keys, t, lookback)
}

func (s *Store) countDistinct(ctx context.Context, keys []string, t tier, lookback int64) (_ []int64, err error) {
	ctx, end := s.start(ctx, "count distinct")
	defer func() { end(err) }()
	out := make([]int64, len(keys))
	errs := make([]error, len(keys))
	failed := false
	hdr := s.header()
	lb := strconv.FormatInt(lookback, 10)
	type res struct {
		done chan struct{}
		n    int64
		err  error
	}
	rs := make([]*res, len(keys))
	for i, k := range keys {
		r := &res{done: make(chan struct{})}
		rs[i] = r
		rk, err := s.redisKey(k, t.tag)
		if err != nil {
			r.err = rename(err, "count distinct")
			close(r.done)
			continue
		}
		go func() {
			defer close(r.done)
			msg, err := s.run(ctx, distinctKeys(rk, t, s.futureMs), hdr, false, backend.OpDCount, t.shape, lb)
			if err == nil {
				r.n, err = sumOf(one(msg))
			}
			r.err = fail("count distinct", k, s.be.Write, err)
		}()
	}
	for i, r := range rs {
		<-r.done
		out[i], errs[i] = r.n, r.err
		failed = failed || r.err != nil
	}
	if failed {
		return out, &ManyError{Errs: errs}
	}
	return out, nil
}
