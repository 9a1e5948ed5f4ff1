package tests

import (
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
)

const exact53 = int64(1) << 53

func (m *exactModel) clone() *exactModel {
	c := *m
	c.buckets = maps.Clone(m.buckets)
	return &c
}

// groupRetry is what a refused AllowAll's RetryAfter must be: the earliest
// wait after which every policy admits cost, if nothing else is counted (the
// sums change only when a bucket leaves, so the waits worth trying are 0 and
// those); -1 when a cost exceeds its limit, or no wait will do.
func groupRetry(models []*exactModel, now time.Time, cost int64, limits []int64) time.Duration {
	taus := []int64{0}
	for i, m := range models {
		if cost > limits[i] {
			return -1
		}
		for _, s := range m.live(now, m.w.Length) {
			taus = append(taus, s+m.w.Length.Milliseconds()-now.UnixMilli())
		}
	}
	slices.Sort(taus)
	for _, tau := range taus {
		all := true
		for i, m := range models {
			rem := new(big.Int)
			for _, s := range m.live(now, m.w.Length) {
				if s+m.w.Length.Milliseconds()-now.UnixMilli() > tau {
					rem.Add(rem, m.buckets[s])
				}
			}
			if rem.Add(rem, big.NewInt(cost)).Cmp(big.NewInt(limits[i])) > 0 {
				all = false
				break
			}
		}
		if all {
			return time.Duration(tau) * time.Millisecond
		}
	}
	return -1
}

// remainingAt is a model's window sum once the buckets that leave within tau
// have left.
func remainingAt(m *exactModel, now time.Time, tau int64) *big.Int {
	rem := new(big.Int)
	for _, s := range m.live(now, m.w.Length) {
		if s+m.w.Length.Milliseconds()-now.UnixMilli() > tau {
			rem.Add(rem, m.buckets[s])
		}
	}
	return rem
}

// TestGroupBigNumbers plays random batches near ±2^53 and ±2^63 on one key's
// three windows, kept both as three stores (policies of several stores) and
// as one multi-resolution store (tiers), against big-integer models: every
// Apply sum and overflow, and every AllowAll decision, per-policy sum,
// remaining, retry and reset, and the group's retry. Limits are often set at
// the exact edge: limit - cost equal to the sum (admitted), one less
// (refused), and where a bucket's leaving makes the cost fit exactly (the
// retry), with sums just below and at 2^53 where the scripts compare decimal
// pairs instead of doubles.
func TestGroupBigNumbers(t *testing.T) {
	ws := []store.Window{{Length: 10 * time.Second, Bucket: time.Second}, {Length: time.Minute, Bucket: 5 * time.Second},
		{Length: 5 * time.Minute, Bucket: time.Minute}}
	forEach(t, func(t *testing.T, tg target) {
		ss := policyStores(t, tg, ws...)
		tiered, _ := newStore(t, tg, ws[0], store.WithTiers(ws[1:]...))
		for _, shape := range []string{"stores", "tiers"} {
			t.Run(shape, func(t *testing.T) {
				for seed := uint64(1); seed <= 2; seed++ {
					bigGroupWalk(t, shape, ss, tiered, ws, seed)
				}
			})
		}
	})
}

func bigGroupWalk(t *testing.T, shape string, ss []*store.Store, tiered *store.Store, ws []store.Window, seed uint64) {
	ctx := ctxT(t)
	key := fmt.Sprintf("g%d", seed)
	var models []*exactModel
	for _, w := range ws {
		models = append(models, newExactModel(mustCodec(t, w.Bucket), w))
	}
	policies := func(limits []int64) []store.Quota {
		ps := make([]store.Quota, len(ws))
		for i := range ws {
			if shape == "stores" {
				ps[i] = store.Quota{Store: ss[i], Key: key, Limit: limits[i]}
			} else {
				ps[i] = store.Quota{Store: tiered.Over(ws[i].Length), Key: key, Limit: limits[i]}
			}
		}
		return ps
	}
	count := func(delta int64) store.Batch {
		if shape == "tiers" {
			return store.Batch{Ops: []store.Op{{Store: tiered, Key: key, Delta: delta}}}
		}
		var ops []store.Op
		for _, s := range ss {
			ops = append(ops, store.Op{Store: s, Key: key, Delta: delta})
		}
		return store.Batch{Ops: ops}
	}
	rng := rand.New(rand.NewPCG(seed, 2053))
	at := utc("2026-05-01T09:00:00Z").Add(time.Duration(seed) * time.Hour)
	seen := map[string]int{}
	defer func() { t.Logf("seed %d outcomes: %v", seed, seen) }()
	for step := 0; step < 160; step++ {
		at = at.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		if rng.IntN(12) == 0 {
			at = at.Add(ws[0].Length)
		}
		where := fmt.Sprintf("step %d at %v", step, at.Format(time.RFC3339Nano))
		sums := make([]*big.Int, len(models))
		for i, m := range models {
			sums[i] = m.sum(at, m.w.Length)
		}
		if rng.IntN(5) < 2 {
			// Apply: one delta counted in every window.
			var delta int64
			if rng.IntN(3) == 0 && sums[0].IsInt64() { // bring window 0 to 2^53 or just below it
				target := exact53 - rng.Int64N(3)*rng.Int64N(1<<27)
				delta = new(big.Int).Sub(big.NewInt(target), sums[0]).Int64()
				if !new(big.Int).Sub(big.NewInt(target), sums[0]).IsInt64() {
					delta = hugeValue(rng)
				}
			} else {
				delta = hugeValue(rng)
			}
			ok := true
			for _, m := range models {
				c := m.clone()
				if _, fine := c.add(at, delta); !fine {
					ok = false
				}
			}
			res, err := applyAt(ctx, at, count(delta))
			if !ok {
				require.ErrorIs(t, err, store.ErrOverflow, "%s: Apply %d must overflow (sums %v)", where, delta, sums)
				seen["apply overflow"]++
				continue
			}
			require.NoError(t, err, "%s: Apply %d", where, delta)
			var want []int64
			for _, m := range models {
				s, _ := m.add(at, delta)
				want = append(want, s.Int64())
			}
			if shape == "tiers" {
				require.Equal(t, want, res[0].Values[0].Sums, "%s: Apply %d", where, delta)
			} else {
				for i := range want {
					require.Equal(t, want[i], res[0].Values[i].Sum, "%s: Apply %d, window %d", where, delta, i)
				}
			}
			seen["apply"]++
			continue
		}
		// AllowAll: a cost, and limits at or near the edges.
		costs := []int64{0, 1, 5, 1 << 52, rng.Int64N(exact53 + 1)}
		cost := costs[rng.IntN(len(costs))]
		limits := make([]int64, len(models))
		for i, s := range sums {
			switch k := rng.IntN(4); {
			case k < 2 && s.IsInt64() && s.Sign() >= 0 && s.Int64() <= exact53:
				cost = min(cost, exact53-s.Int64())
				limits[i] = s.Int64() + cost - int64(k) // admitted exactly at the edge, or refused by one
				if limits[i] < 0 {
					limits[i] = 0
				}
			case k == 2:
				limits[i] = exact53
			default:
				limits[i] = rng.Int64N(exact53 + 1)
			}
		}
		// Sometimes a limit that a leaving bucket makes fit exactly.
		if rng.IntN(3) == 0 {
			i := rng.IntN(len(models))
			if live := models[i].live(at, ws[i].Length); len(live) > 0 {
				s := live[rng.IntN(len(live))]
				tau := s + ws[i].Length.Milliseconds() - at.UnixMilli()
				rem := remainingAt(models[i], at, tau)
				rem.Add(rem, big.NewInt(cost))
				if rem.Sign() >= 0 && rem.Cmp(big.NewInt(exact53)) <= 0 {
					limits[i] = rem.Int64()
				}
			}
		}
		for i := range limits {
			limits[i] = max(limits[i], cost) // keep most decisions possible
			if rng.IntN(20) == 0 {
				limits[i] = max(cost-1, 0) // a cost above its limit: never
			}
		}
		overflow := false
		for _, s := range sums {
			if !fitsInt64(s) {
				overflow = true
			}
		}
		fits := make([]bool, len(models))
		allowed := true
		for i, s := range sums {
			fits[i] = cost <= limits[i] && new(big.Int).Add(s, big.NewInt(cost)).Cmp(big.NewInt(limits[i])) <= 0
			allowed = allowed && fits[i]
		}
		if allowed && cost > 0 && !overflow {
			for _, m := range models { // the bucket the cost goes to must stay within int64
				b := new(big.Int).Add(m.value(m.start(at)), big.NewInt(cost))
				if !fitsInt64(b) {
					overflow = true
				}
			}
		}
		r, err := allowAllAt(ctx, at, cost, policies(limits)...)
		if overflow {
			require.ErrorIs(t, err, store.ErrOverflow, "%s: AllowAll(%d, %v) on %v", where, cost, limits, sums)
			seen["allow overflow"]++
			continue
		}
		require.NoError(t, err, "%s: AllowAll(%d, %v) on %v", where, cost, limits, sums)
		require.Equal(t, allowed, r.Allowed, "%s: AllowAll(%d, %v) on %v", where, cost, limits, sums)
		for i, m := range models {
			var want store.Decision
			if allowed {
				want, _ = m.allow(at, limits[i], cost) // counts the cost
			} else if fits[i] {
				want, _ = m.clone().allow(at, limits[i], 0)
			} else {
				want, _ = m.clone().allow(at, limits[i], cost)
			}
			got := r.Policies[i]
			require.Equal(t, []any{want.Limit, want.Sum, want.Remaining, want.RetryAfter, want.ResetAfter},
				[]any{got.Limit, got.Sum, got.Remaining, got.RetryAfter, got.ResetAfter},
				"%s: AllowAll(%d, %v) on %v: policy %d", where, cost, limits, sums, i)
		}
		if allowed {
			require.Zero(t, r.RetryAfter, where)
			seen["allow admitted"]++
			continue
		}
		require.Equal(t, groupRetry(models, at, cost, limits), r.RetryAfter, "%s: AllowAll(%d, %v) on %v: retry", where, cost, limits, sums)
		require.False(t, fits[refusedBy(r)], "%s: RefusedBy %d admits", where, refusedBy(r))
		seen[fmt.Sprintf("allow refused, retry>0 %v", r.RetryAfter > 0)]++
	}
	require.Greater(t, seen["allow admitted"], 5)
	require.Greater(t, seen["allow refused, retry>0 true"], 5)
}

// TestRecordBigNumbers records events with amounts near ±2^53 and ±2^63
// through a feature set (a Sum over three windows, a Count, a Limit) on every
// backend, against big-integer models: every value exact, an event whose sum
// would leave int64 fails with ErrOverflow and counts nothing in any feature
// of its entity.
func TestRecordBigNumbers(t *testing.T) {
	ws := []store.Window{{Length: 10 * time.Second, Bucket: time.Second}, {Length: time.Minute, Bucket: 5 * time.Second},
		{Length: 5 * time.Minute, Bucket: time.Minute}}
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		srv := newStoreServer(t, tg)
		set, err := features.New(ctx, srv.Client(t), []features.Feature{
			{Name: "spend", Entity: "card", Kind: features.Sum, Windows: ws},
			{Name: "uses", Entity: "card", Kind: features.Count, Windows: ws[:1]},
			{Name: "cap", Entity: "card", Kind: features.Limit, Windows: ws[1:2], Limits: []int64{40}},
		}, store.WithPrefix(prefixFor(t)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		var spend []*exactModel
		for _, w := range ws {
			spend = append(spend, newExactModel(mustCodec(t, w.Bucket), w))
		}
		uses := newExactModel(mustCodec(t, ws[0].Bucket), ws[0])
		capm := newExactModel(mustCodec(t, ws[1].Bucket), ws[1])
		rng := rand.New(rand.NewPCG(7, 63))
		at := utc("2026-07-01T12:00:00Z")
		overflows := 0
		for step := 0; step < 150; step++ {
			at = at.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
			amount := hugeValue(rng)
			ok := true
			for _, m := range spend {
				if _, fine := m.clone().add(at, amount); !fine {
					ok = false
				}
			}
			r, err := set.At(at).Record(ctx, features.Event{Entities: map[string]string{"card": "c"}, Amount: amount})
			where := fmt.Sprintf("step %d at %v amount %d", step, at.Format(time.RFC3339Nano), amount)
			if !ok {
				require.ErrorIs(t, err, store.ErrOverflow, where)
				overflows++
				continue
			}
			require.NoError(t, err, where)
			var want []int64
			for _, m := range spend {
				s, _ := m.add(at, amount)
				want = append(want, s.Int64())
			}
			v, _ := r.Get("spend")
			require.Equal(t, want, v.Sums, where)
			n, _ := uses.add(at, 1)
			v, _ = r.Get("uses")
			require.Equal(t, n.Int64(), v.Sum, where)
			admit := capm.sum(at, ws[1].Length).Int64()+1 <= 40
			require.Equal(t, admit, r.Allowed, where)
			if admit {
				capm.add(at, 1)
			}
			v, _ = r.Get("cap")
			require.Equal(t, capm.sum(at, ws[1].Length).Int64(), v.Sum, where)
		}
		require.Greater(t, overflows, 3)
		require.Less(t, overflows, 100)
	})
}
