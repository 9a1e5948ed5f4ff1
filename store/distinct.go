package store

import (
	"context"
	"strconv"

	"github.com/windowstore/windowstore/internal/backend"
)

// Distinct counts (StatDistinct): how many different members (cards,
// accounts, devices) a key saw in the window. Each bucket of a key's
// distinct count is a HyperLogLog (PFADD) in a ring of keys; the store also keeps the union of the
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

// addDistinct adds an event's members to its key's distinct count (in every
// tier of a multi-resolution store) and answers the number of distinct
// members in the window: RecordStat of StatDistinct.
func (s *Store) addDistinct(ctx context.Context, o StatEvent) (StatValue, error) {
	if len(o.Members) == 0 {
		return StatValue{}, invalid("record stat", o.Key, "no members")
	}
	if len(s.tiers) > 1 || o.ID != "" || !o.Time.IsZero() {
		res, err := apply(ctx, []Batch{{ID: o.ID, Time: o.Time, Ops: []Op{{Store: s, Key: o.Key, Kind: OpDistinct, Members: o.Members}}}})
		if err != nil {
			return StatValue{}, rename(first(err), "record stat")
		}
		return distinctOf(res[0].Values[0].Sum), nil
	}
	// One window, now, no id: an operation of its own (the group's distinct
	// item, without the group's machinery).
	rk, err := s.redisKey(o.Key, s.tag)
	if err != nil {
		return StatValue{}, rename(err, "record stat")
	}
	if err := checkDistinct("record stat", o.Key, s.tiers[0], s.futureMs); err != nil {
		return StatValue{}, err
	}
	args := append([]string{backend.OpDAdd, s.shape, strconv.Itoa(len(o.Members))}, o.Members...)
	msg, err := s.run(ctx, distinctKeys(rk, s.tiers[0], s.futureMs), s.header(), false, args...)
	if err != nil {
		return StatValue{}, fail("record stat", o.Key, s.be.Write, err)
	}
	n, err := sumOf(one(msg))
	return distinctOf(n), fail("record stat", o.Key, nil, err)
}

// distinctOf is a distinct count as a StatValue.
func distinctOf(n int64) StatValue { return StatValue{OK: n > 0, Value: n} }

// readDistinct answers the distinct counts of many keys over the window of
// the store's Over view: ReadStatMany of StatDistinct.
func (s *Store) readDistinct(ctx context.Context, keys []string) ([]StatValue, error) {
	t, lookback, err := s.span("read stat", keys[0])
	if err != nil {
		return nil, err
	}
	if err := checkDistinct("read stat", keys[0], t, s.futureMs); err != nil {
		return nil, err
	}
	ns, err := s.countDistinct(ctx, keys, t, lookback)
	out := make([]StatValue, len(ns))
	for i, n := range ns {
		out[i] = distinctOf(n)
	}
	return out, err
}

func (s *Store) countDistinct(ctx context.Context, keys []string, t tier, lookback int64) ([]int64, error) {
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
			r.err = rename(err, "read stat")
			close(r.done)
			continue
		}
		go func() {
			defer close(r.done)
			msg, err := s.run(ctx, distinctKeys(rk, t, s.futureMs), hdr, false, backend.OpDCount, t.shape, lb)
			if err == nil {
				r.n, err = sumOf(one(msg))
			}
			r.err = fail("read stat", k, s.be.Write, err)
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
