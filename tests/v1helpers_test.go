package tests

import (
	"context"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

// allowAllAt is store.AllowAll at instant at: its policies' stores as At views.
func allowAllAt(ctx context.Context, at time.Time, cost int64, ps ...store.Quota) (store.Decision, error) {
	vs := make([]store.Quota, len(ps))
	for i, p := range ps {
		vs[i] = p
		vs[i].Store = p.Store.At(at)
	}
	return store.AllowAll(ctx, cost, vs...)
}

// applyAt is store.Apply at instant at: its ops' stores as At views.
func applyAt(ctx context.Context, at time.Time, batches ...store.Batch) ([]store.BatchResult, error) {
	vs := make([]store.Batch, len(batches))
	for i, b := range batches {
		vs[i] = b
		vs[i].Ops = make([]store.Op, len(b.Ops))
		for j, o := range b.Ops {
			vs[i].Ops[j] = o
			vs[i].Ops[j].Store = o.Store.At(at)
		}
	}
	return store.Apply(ctx, vs...)
}

// refusedBy is the index in d.Policies of the policy whose refusal decides
// (0 for a decision of one policy); -1 when allowed.
func refusedBy(d store.Decision) int {
	if d.Allowed {
		return -1
	}
	for i, p := range d.Policies {
		if !p.Allowed && p.Policy == d.Policy {
			return i
		}
	}
	return 0
}

// clientOf is the client a store was made with.
func clientOf(st *store.Store) rueidis.Client { return hook.Client(st).(rueidis.Client) }

// addDistinct adds members to key's distinct count and answers the count
// (RecordStat of StatDistinct).
func addDistinct(ctx context.Context, s *store.Store, key string, members ...string) (int64, error) {
	v, err := s.RecordStat(ctx, store.StatEvent{Key: key, Stat: store.StatDistinct, Members: members})
	return v.Value, err
}

// countDistinct reads key's distinct count (ReadStat of StatDistinct).
func countDistinct(ctx context.Context, s *store.Store, key string) (int64, error) {
	v, err := s.ReadStat(ctx, key, store.StatDistinct)
	return v.Value, err
}

// countDistinctMany reads the distinct counts of keys, in order.
func countDistinctMany(ctx context.Context, s *store.Store, keys []string) ([]int64, error) {
	vs, err := s.ReadStatMany(ctx, keys, store.StatDistinct)
	if vs == nil {
		return nil, err
	}
	ns := make([]int64, len(vs))
	for i, v := range vs {
		ns[i] = v.Value
	}
	return ns, err
}
