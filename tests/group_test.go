package tests

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

// policyStores makes one store per window under one prefix: their counters
// of one key share the key's slot.
func policyStores(t *testing.T, tg target, ws ...store.Window) []*store.Store {
	t.Helper()
	s0, _ := newStore(t, tg, ws[0])
	out := []*store.Store{s0}
	for _, w := range ws[1:] {
		s, err := store.New(ctxT(t), clientOf(s0), w, store.WithPrefix(prefixOf(t, s0)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		out = append(out, s)
	}
	return out
}

// prefixOf recovers a store's prefix from one of its keys.
func prefixOf(t *testing.T, s *store.Store) string {
	rk, err := hook.RedisKey(s, "x")
	require.NoError(t, err)
	return rk[:len(rk)-len("{x}:")-len(hook.WindowTag(s.Window()))]
}

// dump is every key's DUMP, to see that nothing was written.
func dump(t *testing.T, c rueidis.Client, keys ...string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		v, err := c.Do(ctxT(t), c.B().Dump().Key(k).Build()).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			require.NoError(t, err)
		}
		out[i] = v
	}
	return out
}

// TestAllowAllConcurrent: 40 concurrent callers of a three-policy AllowAll
// admit exactly the tightest limit, on every backend, and every counter holds
// exactly what was admitted.
func TestAllowAllConcurrent(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ss := policyStores(t, tg, store.Window{Length: time.Minute, Bucket: time.Second},
			store.Window{Length: time.Hour, Bucket: time.Minute}, store.Window{Length: 24 * time.Hour, Bucket: time.Hour})
		ctx := ctxT(t)
		policies := []store.Quota{{Store: ss[0], Key: "u", Limit: 12}, {Store: ss[1], Key: "u", Limit: 7}, {Store: ss[2], Key: "u", Limit: 30}}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := store.AllowAll(ctx, 1, policies...)
				if !assert.NoError(t, err) {
					return
				}
				if r.Allowed {
					admitted.Add(1)
					return
				}
				assert.Equal(t, 1, refusedBy(r), "the hour policy refuses")
				assert.Greater(t, r.RetryAfter, time.Duration(0))
				assert.Len(t, r.Policies, 3)
			}()
		}
		wg.Wait()
		require.EqualValues(t, 7, admitted.Load())
		for _, s := range ss {
			n, err := s.Sum(ctx, "u")
			require.NoError(t, err)
			require.EqualValues(t, 7, n, s.Window())
		}
	})
}

// TestAllowAllRefusalWritesNothing: a refusal by any policy leaves every
// counter exactly as it was (DUMP), on every backend.
func TestAllowAllRefusalWritesNothing(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ss := policyStores(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second}, store.Window{Length: time.Minute, Bucket: 10 * time.Second})
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Minute).Add(-2 * time.Minute)
		for i := 0; i < 3; i++ {
			r, err := allowAllAt(ctx, t0.Add(time.Duration(i)*time.Second), 1,
				store.Quota{Store: ss[0], Key: "k", Limit: 3}, store.Quota{Store: ss[1], Key: "k", Limit: 100})
			require.NoError(t, err)
			require.True(t, r.Allowed)
		}
		ks := append(counterKeys(t, ss[0], "k"), counterKeys(t, ss[1], "k")...)
		c := clientOf(ss[0])
		before := dump(t, c, ks...)
		for i := 0; i < 20; i++ {
			r, err := allowAllAt(ctx, t0.Add(3*time.Second+time.Duration(i)*100*time.Millisecond), 1,
				store.Quota{Store: ss[0], Key: "k", Limit: 3}, store.Quota{Store: ss[1], Key: "k", Limit: 100})
			require.NoError(t, err)
			require.False(t, r.Allowed)
			require.Equal(t, 0, refusedBy(r))
		}
		require.Equal(t, before, dump(t, c, ks...), "a refusal wrote")
	})
}

// multiModel is the exact model of several windows over one key's events.
type multiModel struct {
	models []*exactModel
}

// fits reports whether every policy admits cost at now.
func (m *multiModel) fits(now time.Time, cost int64, limits []int64) bool {
	for i, mm := range m.models {
		if cost > limits[i] || new(big.Int).Add(mm.sum(now, mm.w.Length), big.NewInt(cost)).Cmp(big.NewInt(limits[i])) > 0 {
			return false
		}
	}
	return true
}

// TestAllowAllRandomWalk plays random multi-policy decisions and adds on
// counters of three windows, against the exact model: every decision, every
// policy's sum (and on a refusal its reset), and the retry-after is honest:
// a retry a millisecond before it fails, and one at it succeeds. Costs go
// above 1. The counters are one key's ("one key": one group of limits in one
// slot), or three keys' in three slots ("three slots", slots 536, 5763 and
// 9998: a link of three groups in one script call); and again with limits
// and costs 2^48 times as large ("big"), the limits capped at 2^53 (the
// largest a limit may be), so that sums reach 2^53, where the scripts leave
// their double arithmetic for the exact path.
func TestAllowAllRandomWalk(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ws := []store.Window{{Length: 10 * time.Second, Bucket: time.Second}, {Length: time.Minute, Bucket: 5 * time.Second},
			{Length: 5 * time.Minute, Bucket: time.Minute}}
		ss := policyStores(t, tg, ws...)
		for _, c := range []struct {
			name  string
			keys  [3]string
			scale int64
		}{{"one key", [3]string{"w", "w", "w"}, 1}, {"three slots", [3]string{"user:w", "ip:w", "device:w"}, 1},
			{"big one key", [3]string{"wb", "wb", "wb"}, 1 << 48},
			{"big three slots", [3]string{"user:wb", "ip:wb", "device:wb"}, 1 << 48}} { // slots 15458, 11419, 7845
			t.Run(c.name, func(t *testing.T) { allowAllWalk(t, ss, ws, c.keys, c.scale) })
		}
	})
}

// modelReset is the time until every live bucket of mm's window that is not
// 0 has left it, at now: 0 for none.
func modelReset(mm *exactModel, now time.Time) time.Duration {
	live := mm.live(now, mm.w.Length)
	for i := len(live) - 1; i >= 0; i-- {
		if mm.buckets[live[i]].Sign() != 0 {
			return time.Duration(live[i]+mm.w.Length.Milliseconds()-now.UnixMilli()) * time.Millisecond
		}
	}
	return 0
}

// allowAllWalk is TestAllowAllRandomWalk's walk on the stores ss (windows
// ws), policy i on keys[i], limits and costs times scale.
func allowAllWalk(t *testing.T, ss []*store.Store, ws []store.Window, keys [3]string, scale int64) {
	ctx := ctxT(t)
	m := &multiModel{}
	for i, s := range ss {
		m.models = append(m.models, newExactModel(hook.Codec(s), ws[i]))
	}
	rng := rand.New(rand.NewPCG(5, 9))
	at := utc("2026-04-01T08:00:00Z")
	refusals := 0
	for step := 0; step < 250; step++ {
		at = at.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		limits := []int64{(4 + rng.Int64N(4)) * scale, (10 + rng.Int64N(8)) * scale, min((25+rng.Int64N(10))*scale, 1<<53)}
		cost := rng.Int64N(4) * scale
		var ps []store.Quota
		for i, s := range ss {
			ps = append(ps, store.Quota{Store: s, Key: keys[i], Limit: limits[i]})
		}
		want := m.fits(at, cost, limits)
		r, err := allowAllAt(ctx, at, cost, ps...)
		require.NoError(t, err)
		require.Equal(t, want, r.Allowed, "step %d at %v cost %d limits %v", step, at, cost, limits)
		if want {
			for _, mm := range m.models {
				_, ok := mm.add(at, cost)
				require.True(t, ok)
			}
		}
		for i, mm := range m.models {
			require.Equal(t, mm.sum(at, ws[i].Length).Int64(), r.Policies[i].Sum, "step %d policy %d", step, i)
			if want {
				// Admitted: each policy's reset counts the cost just counted.
				require.Equal(t, modelReset(mm, at), r.Policies[i].ResetAfter, "step %d policy %d: reset", step, i)
				continue
			}
			// Refused: each policy's reset is its window's, with nothing
			// counted (one server: the event is decided in one script).
			require.Equal(t, modelReset(mm, at), r.Policies[i].ResetAfter, "step %d policy %d: reset", step, i)
		}
		if want || r.RetryAfter <= 0 {
			continue
		}
		refusals++
		ra := r.RetryAfter
		require.LessOrEqual(t, ra, 5*time.Minute)
		require.False(t, m.fits(at.Add(ra-time.Millisecond), cost, limits), "the model admits before RetryAfter")
		early, err := allowAllAt(ctx, at.Add(ra-time.Millisecond), cost, ps...)
		require.NoError(t, err)
		require.False(t, early.Allowed, "step %d: admitted a millisecond before RetryAfter %v", step, ra)
		at = at.Add(ra)
		ok, err := allowAllAt(ctx, at, cost, ps...)
		require.NoError(t, err)
		require.True(t, ok.Allowed, "step %d: refused at RetryAfter %v", step, ra)
		for _, mm := range m.models {
			_, fine := mm.add(at, cost)
			require.True(t, fine)
		}
	}
	require.Greater(t, refusals, 10)
}

// TestTiers: a multi-resolution counter keeps every tier in one write, and a
// sum over a window reads that window's tier, exactly, against the model of
// each tier's buckets; and a tiered Allow counts the cost in every tier.
func TestTiers(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ws := []store.Window{{Length: 10 * time.Minute, Bucket: 10 * time.Second}, {Length: time.Hour, Bucket: time.Minute},
			{Length: 24 * time.Hour, Bucket: time.Hour}}
		s, _ := newStore(t, tg, ws[0], store.WithTiers(ws[1:]...))
		ctx := ctxT(t)
		var models []*exactModel
		for _, w := range ws {
			c := mustCodec(t, w.Bucket)
			models = append(models, newExactModel(c, w))
		}
		rng := rand.New(rand.NewPCG(3, 3))
		at := utc("2026-02-28T20:00:00Z")
		for step := 0; step < 200; step++ {
			at = at.Add(time.Duration(rng.Int64N(int64(10 * time.Minute))))
			d := rng.Int64N(50) - 10
			got, err := s.At(at).Add(ctx, "t", d)
			require.NoError(t, err)
			for _, m := range models {
				_, ok := m.add(at, d)
				require.True(t, ok)
			}
			require.Equal(t, models[0].sum(at, ws[0].Length).Int64(), got, "step %d", step)
			for _, d := range []time.Duration{30 * time.Second, 10 * time.Minute, 30 * time.Minute, time.Hour, 7 * time.Hour, 24 * time.Hour} {
				i := map[time.Duration]int{30 * time.Second: 0, 10 * time.Minute: 0, 30 * time.Minute: 1, time.Hour: 1, 7 * time.Hour: 2, 24 * time.Hour: 2}[d]
				n, err := s.At(at).Over(d).Sum(ctx, "t")
				require.NoError(t, err)
				require.Equal(t, models[i].sum(at, d).Int64(), n, "step %d: SumOver %v", step, d)
			}
		}
		_, err := s.Over(90*time.Second).Sum(ctx, "t")
		require.NoError(t, err, "90s is 9 buckets of the 10-minute tier")
		_, err = s.Over(25*time.Hour).Sum(ctx, "t")
		require.ErrorIs(t, err, store.ErrInvalid)
		// A tiered Allow decides on the store's window and counts in every tier.
		r, err := s.At(at).Allow(ctx, "lim", 1, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		for _, d := range []time.Duration{10 * time.Minute, time.Hour, 24 * time.Hour} {
			n, err := s.At(at).Over(d).Sum(ctx, "lim")
			require.NoError(t, err)
			require.EqualValues(t, 1, n, d)
		}
		r, err = s.At(at).Allow(ctx, "lim", 1, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		n, err := s.At(at).Over(24*time.Hour).Sum(ctx, "lim")
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "a refusal counted in another tier")
	})
}

// TestEventIDs: an event id is counted once, whatever the retries, on every
// backend: sequential repeats, 40 concurrent callers, and repeats coalesced
// into one script call; a refused Allow records nothing, so its retry is
// decided anew; an admitted one answers its decision again.
func TestEventIDs(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithBatching(64, 1))
		ctx := ctxT(t)
		a, err := s.Record(ctx, store.Event{Key: "k", Delta: 5, ID: "evt-1"})
		require.NoError(t, err)
		require.False(t, a.Duplicate)
		require.EqualValues(t, 5, a.Sum)
		a, err = s.Record(ctx, store.Event{Key: "k", Delta: 5, ID: "evt-1"})
		require.NoError(t, err)
		require.True(t, a.Duplicate)
		require.EqualValues(t, 5, a.Sum, "a duplicate answers the state now")
		// 40 callers, one id each round: one counts.
		for round := 0; round < 3; round++ {
			var counted atomic.Int64
			var wg sync.WaitGroup
			id := "burst-" + strconv.Itoa(round)
			for i := 0; i < 40; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, err := s.Record(ctx, store.Event{Key: "c", Delta: 1, ID: id})
					if assert.NoError(t, err) && !a.Duplicate {
						counted.Add(1)
					}
				}()
			}
			wg.Wait()
			require.EqualValues(t, 1, counted.Load())
		}
		n, err := s.Sum(ctx, "c")
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		// Allow: an admitted id answers its decision again; a refused one
		// records nothing.
		r, err := s.Record(ctx, store.Event{Key: "a", Delta: 1, ID: "x", Limit: 1})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		r, err = s.Record(ctx, store.Event{Key: "a", Delta: 1, ID: "x", Limit: 1})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.True(t, r.Duplicate)
		r, err = s.Record(ctx, store.Event{Key: "a", Delta: 1, ID: "y", Limit: 1})
		require.NoError(t, err)
		require.False(t, r.Allowed)
		require.False(t, r.Duplicate)
		rk, _ := hook.RedisKey(s, "a")
		c := srv.Client(t)
		ex, err := c.Do(ctx, c.B().Exists().Key(rk+":id:y").Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, ex, "a refusal recorded its id")
		// The id lives as long as the window (and a bucket), no longer.
		pttl, err := c.Do(ctx, c.B().Pttl().Key(rk+":id:x").Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, int64(0))
		require.LessOrEqual(t, pttl, (time.Minute + time.Second).Milliseconds())
		// Ids from user input are escaped like keys.
		a, err = s.Record(ctx, store.Event{Key: "k", Delta: 1, ID: "{evil} id"})
		require.NoError(t, err)
		require.False(t, a.Duplicate)
		ex, err = c.Do(ctx, c.B().Exists().Key(rk[:len(rk)-len("{a}:1m/1s")]+"{k}:1m/1s:id:%7Bevil%7D%20id").Build()).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, ex)
	})
}

// lateModel is the exact model of a counter fed late and early events: an
// event counts when its bucket is still in the window at the clock's now (or
// in the current bucket, when it is ahead of now within the tolerance).
type lateModel struct {
	*exactModel
	future time.Duration
}

// add answers "ok", "old" or "future", and counts the event when ok.
func (m *lateModel) add(now, e time.Time, d int64) string {
	switch {
	case e.After(now.Add(m.future)):
		return "future"
	case !e.Before(now):
		e = now
	}
	s := m.start(e)
	if s <= now.Add(-m.w.Length).UnixMilli() {
		return "old"
	}
	v := m.value(s)
	m.buckets[s] = new(big.Int).Add(v, big.NewInt(d))
	return "ok"
}

// TestLateEvents plays shuffled event streams (events delivered late, out of
// order, some too old, some ahead of the clock) against the exact model on
// every backend, the plain hash's running total included: every answer, and
// no newer bucket is ever lost.
func TestLateEvents(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: time.Minute, Bucket: 5 * time.Second}
		s, _ := newStore(t, tg, w, store.WithFutureTolerance(2*time.Second))
		ctx := ctxT(t)
		m := &lateModel{exactModel: newExactModel(hook.Codec(s), w), future: 2 * time.Second}
		rng := rand.New(rand.NewPCG(11, 13))
		now := utc("2025-12-31T23:58:00Z") // across a year end
		seen := map[string]int{}
		for step := 0; step < 300; step++ {
			now = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
			var e time.Time
			switch r := rng.IntN(10); {
			case r < 6: // late, inside the window
				e = now.Add(-time.Duration(rng.Int64N(int64(w.Length))))
			case r < 8: // too old
				e = now.Add(-w.Length - time.Duration(rng.Int64N(int64(w.Length))))
			default: // ahead: within the tolerance or beyond
				e = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
			}
			e = e.Truncate(time.Millisecond)
			d := rng.Int64N(20) - 4
			want := m.add(now, e, d)
			seen[want]++
			a, err := s.At(now).Record(ctx, store.Event{Key: "late", Delta: d, Time: e})
			switch want {
			case "old":
				require.ErrorIs(t, err, store.ErrTooOld, "step %d: event %v at %v", step, e, now)
			case "future":
				require.ErrorIs(t, err, store.ErrFuture, "step %d: event %v at %v", step, e, now)
			default:
				require.NoError(t, err, "step %d: event %v at %v", step, e, now)
				require.Equal(t, m.sum(now, w.Length).Int64(), a.Sum, "step %d: event %v at %v", step, e, now)
			}
			n, err := s.At(now).Sum(ctx, "late")
			require.NoError(t, err)
			require.Equal(t, m.sum(now, w.Length).Int64(), n, "step %d", step)
			n, err = s.At(now).Over(20*time.Second).Sum(ctx, "late")
			require.NoError(t, err)
			require.Equal(t, m.sum(now, 20*time.Second).Int64(), n, "step %d", step)
		}
		t.Logf("events: %v", seen)
		require.Greater(t, seen["old"], 20)
		require.Greater(t, seen["ok"], 100)
	})
}

// TestLateEventTiers: an event too old for the short tier still counts in
// the tiers whose window it is inside.
func TestLateEventTiers(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithTiers(store.Window{Length: time.Hour, Bucket: time.Minute}))
		ctx := ctxT(t)
		now := utc("2026-05-05T10:30:30Z")
		a, err := s.At(now).Record(ctx, store.Event{Key: "k", Delta: 4, Time: now.Add(-10 * time.Minute)})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, a.Counted)
		require.Equal(t, []int64{0, 4}, a.Sums)
		_, err = s.At(now).Record(ctx, store.Event{Key: "k", Delta: 4, Time: now.Add(-2 * time.Hour)})
		require.ErrorIs(t, err, store.ErrTooOld)
		n, err := s.At(now).Over(time.Hour).Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
	})
}

// TestDistinct counts distinct members per window on every backend: across
// buckets, over a lookback, after buckets leave, and in one round trip for
// many keys. HyperLogLog is exact enough at small counts to compare with a
// set; docs/counters.md's error figures come from TestDistinctError.
func TestDistinct(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: time.Minute, Bucket: 10 * time.Second}
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		t0 := utc("2026-01-01T00:00:00Z").Add(-35 * time.Second) // across a year end
		exact := map[time.Time][]string{}
		for i := 0; i < 12; i++ {
			at := t0.Add(time.Duration(i) * 10 * time.Second)
			members := []string{"card-" + strconv.Itoa(i%7), "card-" + strconv.Itoa(i%5+20)}
			n, err := addDistinct(ctx, s.At(at), "dev", members...)
			require.NoError(t, err)
			exact[at] = members
			want := map[string]bool{}
			for a, ms := range exact {
				if a.After(at.Add(-w.Length)) && !a.After(at) {
					for _, m := range ms {
						want[m] = true
					}
				}
			}
			require.EqualValues(t, len(want), n, "at %v", at)
		}
		last := t0.Add(110 * time.Second)
		within, err := countDistinct(ctx, s.At(last).Over(20*time.Second), "dev")
		require.NoError(t, err)
		require.EqualValues(t, 4, within) // the last two buckets: cards 3, 4, 23, 24
		many, err := countDistinctMany(ctx, s, []string{"dev", "nobody"})
		require.NoError(t, err)
		require.EqualValues(t, 0, many[1])
		later, err := countDistinct(ctx, s.At(last.Add(w.Length+w.Bucket)), "dev")
		require.NoError(t, err)
		require.Zero(t, later)
		_, err = addDistinct(ctx, s, "dev")
		require.ErrorIs(t, err, store.ErrInvalid, "no members")
	})
}

// TestApplyRules: batches that break the rules fail before anything is sent.
func TestApplyRules(t *testing.T) {
	tg := targets[0]
	s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
	ctx := ctxT(t)
	_, err := store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: s, Key: "a"}, {Store: s, Key: "b"}}})
	require.ErrorIs(t, err, store.ErrInvalid, "two keys, two slots")
	_, err = store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: s, Key: "a"}, {Store: s, Key: "a", Kind: store.OpLimit, Limit: 5, Delta: 1}}})
	require.ErrorIs(t, err, store.ErrInvalid, "counted and limited")
	u := s.Entity("user:1")
	res, err := store.Apply(ctx, store.Batch{ID: "e", Ops: []store.Op{{Store: u, Key: "logins", Delta: 1}, {Store: u, Key: "cards", Kind: store.OpDistinct, Members: []string{"c1"}}}},
		store.Batch{Ops: []store.Op{{Store: s, Key: "other", Delta: 2}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res[0].Values[0].Sum)
	require.EqualValues(t, 1, res[0].Values[1].Sum)
	require.EqualValues(t, 2, res[1].Values[0].Sum)
}

func mustCodec(t *testing.T, b time.Duration) *codec.Codec {
	c, err := codec.New(b, nil)
	require.NoError(t, err)
	return c
}

// TestGroupOverflowWritesNothing: a batch whose last item would overflow
// (its window sum, or only its bucket) fails with ErrOverflow and leaves the
// batch's other counters, counted and quiet, and its event id, unwritten;
// so a retry after the fix counts once.
func TestGroupOverflowWritesNothing(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second})
		u := s.Entity("user:1")
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Minute).Add(-2 * time.Minute)
		// "sum": the window sum is at the top. "bucket": the sum is not, the
		// current bucket is (an older bucket holds -10).
		_, err := u.At(t0).Add(ctx, "sum", math.MaxInt64)
		require.NoError(t, err)
		_, err = u.At(t0).Add(ctx, "bucket", -10)
		require.NoError(t, err)
		_, err = u.At(t0.Add(time.Second)).Add(ctx, "bucket", math.MaxInt64)
		require.NoError(t, err)
		_, err = u.At(t0.Add(time.Second)).Add(ctx, "quiet", math.MaxInt64-10)
		require.NoError(t, err)
		keys := []string{}
		for _, k := range []string{"a", "b", "quiet", "sum", "bucket"} {
			keys = append(keys, counterKeys(t, u, k)...)
		}
		first, err := hook.RedisKey(u, "a") // what the batch's id key begins with
		require.NoError(t, err)
		c := clientOf(s)
		before := dump(t, c, keys...)
		at := t0.Add(time.Second + 500*time.Millisecond)
		for _, last := range []store.Op{
			{Store: u, Key: "sum", Delta: 1},
			{Store: u, Key: "bucket", Delta: 5},
			{Store: u, Key: "quiet", NoSum: true, Delta: 11},
		} {
			ops := []store.Op{{Store: u, Key: "a", Delta: 1}, {Store: u, Key: "b", NoSum: true, Delta: 1}}
			if last.Key != "quiet" {
				ops = append(ops, store.Op{Store: u, Key: "quiet", NoSum: true, Delta: 1})
			}
			ops = append(ops, last)
			_, err := applyAt(ctx, at, store.Batch{ID: "ev-" + last.Key, Ops: ops})
			require.ErrorIs(t, err, store.ErrOverflow, "overflow of %q", last.Key)
			require.Equal(t, before, dump(t, c, keys...), "a failed batch (overflow of %q) wrote", last.Key)
			idKey := first + ":id:ev-" + last.Key
			n, err := c.Do(ctx, c.B().Exists().Key(idKey).Build()).AsInt64()
			require.NoError(t, err)
			require.Zero(t, n, "the event id of a failed batch was kept")
		}
		// Limits alone, without an id (the script's fast path for them): the
		// window sum of "edge" is 0, within its limit, but its current bucket
		// is at the top, so counting the cost overflows it. The first limit,
		// which admits too, must not be counted either.
		_, err = u.At(t0).Add(ctx, "edge", -math.MaxInt64)
		require.NoError(t, err)
		_, err = u.At(t0.Add(time.Second)).Add(ctx, "edge", math.MaxInt64)
		require.NoError(t, err)
		keys = append(keys, counterKeys(t, u, "edge")...)
		before = dump(t, c, keys...)
		_, err = store.AllowAll(ctx, 1, store.Quota{Store: u.At(at), Key: "a", Limit: 100},
			store.Quota{Store: u.At(at), Key: "edge", Limit: 100})
		require.ErrorIs(t, err, store.ErrOverflow, "overflow of a limit's bucket")
		require.Equal(t, before, dump(t, c, keys...), "a failed AllowAll wrote")
		// Counts, a limit and a distinct add without an id or event time (the
		// script's fast path for an entity's batch of features.Set.Record):
		// when a count ("sum") or a limit's bucket ("edge") overflows, nothing
		// is written, neither the other counters nor the HyperLogLog.
		cards, err := hook.RedisKey(u, "cards")
		require.NoError(t, err)
		keys = append(keys, cards+":d", cards+":d:u")
		before = dump(t, c, keys...)
		for _, last := range []store.Op{{Store: u, Key: "sum", Delta: 1}, {Store: u, Key: "edge", Kind: store.OpLimit, Limit: 100, Delta: 1}} {
			_, err = applyAt(ctx, at, store.Batch{Ops: []store.Op{{Store: u, Key: "a", Delta: 1},
				{Store: u, Key: "cards", Kind: store.OpDistinct, Members: []string{"c1"}},
				{Store: u, Key: "b", Kind: store.OpLimit, Limit: 100, Delta: 1}, last}})
			require.ErrorIs(t, err, store.ErrOverflow, "overflow of %q beside a count, a limit and a distinct add", last.Key)
			require.Equal(t, before, dump(t, c, keys...), "a failed batch without an id (overflow of %q) wrote", last.Key)
		}
	})
}

// TestHeadLivesForItsLongestWindow: one key's windows share a head on the
// plain hash, which holds each window's running total and current bucket.
// The head must live until the last of its windows' current buckets leaves,
// whichever window was written last: a head that expired with its shortest
// window would take the longer windows' current buckets with it. The
// shortest window is written with the others, as it starts a new bucket and
// after it has passed whole (the limits in the head's order, then in
// another), and alone. Real time, about 2 s.
func TestHeadLivesForItsLongestWindow(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ss := policyStores(t, tg, store.Window{Length: 400 * time.Millisecond, Bucket: 100 * time.Millisecond},
			store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		both := func(order ...int) {
			t.Helper()
			var ps []store.Quota
			for _, i := range order {
				ps = append(ps, store.Quota{Store: ss[i], Key: "k", Limit: 100})
			}
			d, err := store.AllowAll(ctx, 1, ps...)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		long := func(want int64, when string) {
			t.Helper()
			sum, err := ss[1].Sum(ctx, "k")
			require.NoError(t, err)
			require.EqualValues(t, want, sum, "the minute's sum %s", when)
		}
		both(0, 1)                         // the head written new
		time.Sleep(150 * time.Millisecond) // the short window's bucket moves on
		both(0, 1)                         // (the head's records in the limits' order)
		time.Sleep(600 * time.Millisecond) // the short window passes whole
		long(2, "once the short window has passed")
		both(1, 0) // (the limits in another order than the head's records)
		time.Sleep(600 * time.Millisecond)
		long(3, "once the short window, written in another order, has passed")
		_, err := ss[0].Add(ctx, "k", 1) // the short window alone
		require.NoError(t, err)
		time.Sleep(600 * time.Millisecond)
		long(3, "once the short window, written alone, has passed")
	})
}

// TestAllowAllEdges covers the paths of a group of limits that the random
// walks rarely take, on every backend: the plain hash's fast path
// (ws_fastopen) must hand each of them to the general one, or take it
// exactly as the general one would.
//   - A new bucket sets the counter's expiry: its key's PTTL is within
//     window + bucket, also after a late event, where it moves the expiry
//     later.
//   - A cost above its limit never fits, even where a negative sum (credits)
//     would leave room for it: refused, RetryAfter -1, nothing written.
//   - A cost that brings a negative bucket back to 0 answers the reset of
//     the buckets that are still not 0 (here an older one).
//   - A sum at exactly limit - cost is admitted, one above is refused.
//   - A group's retry where a credit (a negative bucket) leaving makes an
//     admitting policy refuse again.
func TestAllowAllEdges(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ws := []store.Window{{Length: 10 * time.Second, Bucket: time.Second}, {Length: time.Minute, Bucket: 10 * time.Second}}
		ss := policyStores(t, tg, ws...)
		ctx := ctxT(t)
		c := clientOf(ss[0])
		ps := func(key string, l0, l1 int64) []store.Quota {
			return []store.Quota{{Store: ss[0], Key: key, Limit: l0}, {Store: ss[1], Key: key, Limit: l1}}
		}

		// Expiry, on the server's clock.
		d, err := store.AllowAll(ctx, 1, ps("exp", 5, 5)...)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		longest := time.Duration(0) // (the policies' counters of one key share its head, on the plain hash)
		for _, w := range ws {
			longest = max(longest, w.Length+w.Bucket)
		}
		for i, s := range ss {
			for j, k := range counterKeys(t, s, "exp") {
				pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
				require.NoError(t, err)
				switch {
				case tg.wantBackend == "tairhash":
					require.EqualValues(t, -1, pttl) // no key TTL on TairHash (see TestConformanceExpiry)
				case j == 0 && j < len(counterKeys(t, s, "exp"))-1 && pttl == -2:
					// the plain hash's first bucket is in the head alone
				case j == 0:
					require.Greater(t, pttl, int64(0), "policy %d: no expiry", i)
					require.LessOrEqual(t, pttl, (ws[i].Length + ws[i].Bucket).Milliseconds(), "policy %d", i)
				default:
					require.Greater(t, pttl, int64(0), "policy %d's head: no expiry", i)
					require.LessOrEqual(t, pttl, longest.Milliseconds(), "policy %d's head", i)
				}
			}
		}

		// A new current bucket on a counter whose last write (a late event)
		// left it synced: the key must live until that bucket leaves.
		tl := time.Now().Truncate(time.Second).Add(200 * time.Millisecond)
		for _, s := range ss {
			_, err := s.At(tl).Record(ctx, store.Event{Key: "late", Delta: 1, Time: tl.Add(-5 * time.Second)})
			require.NoError(t, err)
		}
		d, err = allowAllAt(ctx, tl.Add(100*time.Millisecond), 1, ps("late", 5, 5)...)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		if tg.wantBackend != "tairhash" {
			pttl := counterLife(t, ctx, c, ss[0], "late")
			// About 9.7s when the new bucket sets it; the late bucket's
			// expiry alone would leave about 4.7s.
			require.Greater(t, pttl, (ws[0].Length - 3*time.Second).Milliseconds(), "the key expires before its newest bucket leaves")
		}

		t0 := time.Now().Truncate(time.Minute).Add(-3 * time.Minute)
		// Credits do not let a cost above its limit in.
		for _, s := range ss {
			_, err := s.At(t0).Add(ctx, "neg", -10)
			require.NoError(t, err)
		}
		negs := append(counterKeys(t, ss[0], "neg"), counterKeys(t, ss[1], "neg")...)
		before := dump(t, c, negs...)
		d, err = allowAllAt(ctx, t0.Add(100*time.Millisecond), 5, ps("neg", 3, 100)...)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, time.Duration(-1), d.RetryAfter)
		require.Equal(t, before, dump(t, c, negs...), "a refusal wrote")

		// A bucket brought back to 0: the reset is the older bucket's.
		for _, s := range ss {
			_, err := s.At(t0).Add(ctx, "zero", 2)
			require.NoError(t, err)
			_, err = s.At(t0.Add(3*time.Second)).Add(ctx, "zero", -1)
			require.NoError(t, err)
		}
		now := t0.Add(3*time.Second + 200*time.Millisecond)
		d, err = allowAllAt(ctx, now, 1, ps("zero", 5, 5)...)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.EqualValues(t, 2, d.Policies[0].Sum)
		// Policy 0: t0's bucket leaves 10s after t0; policy 1's two events
		// share t0's 10s bucket (1, then 2 with the cost), so its reset is that
		// bucket's.
		require.Equal(t, t0.Add(ws[0].Length).Sub(now), d.Policies[0].ResetAfter)
		require.EqualValues(t, 2, d.Policies[1].Sum)
		require.Equal(t, t0.Add(ws[1].Length).Sub(now), d.Policies[1].ResetAfter)

		// A credit leaving makes an admitting policy refuse again: the
		// group's retry is when both admit at once (t0+23s), not when the
		// refusing one first would (t0+22s, when the other's -1 leaves).
		gs := policyStores(t, tg, store.Window{Length: 20 * time.Second, Bucket: time.Second}, ws[0])
		_, err = gs[0].At(t0.Add(2*time.Second)).Add(ctx, "gr", 6)
		require.NoError(t, err)
		_, err = gs[1].At(t0.Add(12*time.Second)).Add(ctx, "gr", -1)
		require.NoError(t, err)
		_, err = gs[1].At(t0.Add(13*time.Second)).Add(ctx, "gr", 5)
		require.NoError(t, err)
		gp := []store.Quota{{Store: gs[0], Key: "gr", Limit: 5}, {Store: gs[1], Key: "gr", Limit: 5}}
		d, err = allowAllAt(ctx, t0.Add(14*time.Second), 1, gp...)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.Equal(t, 9*time.Second, d.RetryAfter)
		d, err = allowAllAt(ctx, t0.Add(23*time.Second-time.Millisecond), 1, gp...)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		d, err = allowAllAt(ctx, t0.Add(23*time.Second), 1, gp...)
		require.NoError(t, err)
		require.True(t, d.Allowed)

		// The edge: a sum of limit - cost is admitted, one more is refused.
		for i := 0; i < 3; i++ {
			d, err = allowAllAt(ctx, t0.Add(20*time.Second), 2, ps("edge", 6, 100)...)
			require.NoError(t, err)
			require.True(t, d.Allowed, "call %d: a sum of %d, limit 6, cost 2", i, 2*i)
		}
		d, err = allowAllAt(ctx, t0.Add(20*time.Second), 1, ps("edge", 6, 100)...)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		require.EqualValues(t, 6, d.Policies[0].Sum)
	})
}

// TestAllowAllRefusalWalk plays refused groups of three limits on one key's
// dense windows against the exact model: limits near each window's sum, so
// that most refusals are settled by each counter's oldest and newest buckets
// (the plain hash answers those from a few fields, ws_limitspeek), with
// credits (negative buckets) that can make an admitting limit refuse again
// as they leave. The group's retry must be the model's earliest moment, and
// every policy's decision (sum, remaining, its own retry, reset) the
// model's.
func TestAllowAllRefusalWalk(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ws := []store.Window{{Length: time.Minute, Bucket: time.Second}, {Length: 10 * time.Minute, Bucket: 10 * time.Second},
			{Length: time.Hour, Bucket: time.Minute}}
		ss := policyStores(t, tg, ws...)
		ctx := ctxT(t)
		for seed := uint64(1); seed <= 4; seed++ {
			m := &multiModel{}
			for i, s := range ss {
				m.models = append(m.models, newExactModel(hook.Codec(s), ws[i]))
			}
			key := fmt.Sprintf("r%d", seed)
			rng := rand.New(rand.NewPCG(seed, 77))
			at := utc("2026-04-01T08:00:00Z").Add(time.Duration(seed) * 3 * time.Hour)
			seen := map[string]int{}
			for step := 0; step < 300; step++ {
				at = at.Add(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
				where := fmt.Sprintf("seed %d step %d at %v", seed, step, at.Format(time.RFC3339Nano))
				if rng.IntN(3) == 0 {
					delta := rng.Int64N(4)
					if rng.IntN(5) == 0 {
						delta = -rng.Int64N(4) - 1
					}
					for i, s := range ss {
						if rng.IntN(4) == 0 {
							continue // this window alone misses the event
						}
						want, ok := m.models[i].add(at, delta)
						require.True(t, ok)
						got, err := s.At(at).Add(ctx, key, delta)
						require.NoError(t, err, where)
						require.Equal(t, want.Int64(), got, where)
					}
					continue
				}
				cost := rng.Int64N(3)
				limits := make([]int64, len(ws))
				var ps []store.Quota
				for i, mm := range m.models {
					limits[i] = max(0, min(1<<53, mm.sum(at, ws[i].Length).Int64()-cost+rng.Int64N(5)-2))
					if rng.IntN(3) == 0 {
						limits[i] = 1 << 40 // a policy far from its limit
					}
					ps = append(ps, store.Quota{Store: ss[i], Key: key, Limit: limits[i]})
				}
				r, err := allowAllAt(ctx, at, cost, ps...)
				require.NoError(t, err, where)
				want := m.fits(at, cost, limits)
				require.Equal(t, want, r.Allowed, "%s: cost %d limits %v", where, cost, limits)
				if want {
					for _, mm := range m.models {
						_, ok := mm.add(at, cost)
						require.True(t, ok)
					}
					seen["admitted"]++
					continue
				}
				seen["refused"]++
				require.Equal(t, groupRetry(m.models, at, cost, limits), r.RetryAfter, "%s: the group's retry, cost %d limits %v", where, cost, limits)
				for i, mm := range m.models {
					c := cost
					if mm.sum(at, ws[i].Length).Cmp(big.NewInt(limits[i]-cost)) <= 0 && cost <= limits[i] {
						c = 0 // an admitting policy: its state, nothing counted
					}
					pw, ok := mm.clone().allow(at, limits[i], c)
					require.True(t, ok)
					got := r.Policies[i]
					require.Equal(t, []any{pw.Allowed, pw.Sum, pw.Remaining, pw.RetryAfter, pw.ResetAfter},
						[]any{got.Allowed, got.Sum, got.Remaining, got.RetryAfter, got.ResetAfter},
						"%s: policy %d, cost %d limits %v", where, i, cost, limits)
				}
			}
			t.Logf("seed %d: %v", seed, seen)
			require.Greater(t, seen["refused"], 50)
		}
	})
}

// TestAllowAllPeekCredits: refused groups whose answer depends on a credit
// (a negative bucket) that makes an admitting limit refuse again as it
// leaves, on windows of 1 s buckets where the plain hash reads only each
// counter's oldest and newest buckets (ws_limitspeek). Each case is checked
// against the exact model, and against the figures worked out here:
//
//   - horizon: the 1-minute policy admits (1 at t0, -4 at t0+10s, 8 now);
//     the 10-minute one refuses until its oldest bucket leaves, in 20.5 s.
//     By then the credit has left (at 10.5 s) and the 1-minute policy
//     refuses until its newest bucket leaves: 59.5 s. The credit lies past
//     the four oldest buckets that were read.
//   - flip: the same with the credit among the oldest (1 at t0, -2 at
//     t0+1s, 6 now), and a 61 s policy that admits once its bucket of 3
//     leaves, in 2.5 s, after the credit: 59.5 s again.
func TestAllowAllPeekCredits(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ws := []store.Window{{Length: time.Minute, Bucket: time.Second}, {Length: 61 * time.Second, Bucket: time.Second},
			{Length: 10 * time.Minute, Bucket: 10 * time.Second}}
		ss := policyStores(t, tg, ws...)
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Hour).Add(-2 * time.Hour)
		now := t0.Add(59500 * time.Millisecond)
		type ev struct {
			at    time.Duration // from t0
			delta int64
		}
		for _, c := range []struct {
			name     string
			other    int // the store of the second policy
			short    []ev
			long     []ev
			limits   []int64
			retry    time.Duration
			ownRetry time.Duration
			shortSum int64
			otherSum int64
		}{
			{"horizon", 2, []ev{{0, 1}, {10 * time.Second, -4}, {59 * time.Second, 8}},
				[]ev{{-520 * time.Second, 2}, {40 * time.Second, 14}}, []int64{6, 15}, 59500 * time.Millisecond, 20500 * time.Millisecond, 5, 16},
			{"flip", 1, []ev{{0, 1}, {time.Second, -2}, {59 * time.Second, 6}},
				[]ev{{time.Second, 3}, {57 * time.Second, 25}}, []int64{6, 26}, 59500 * time.Millisecond, 2500 * time.Millisecond, 5, 28},
		} {
			models := []*exactModel{newExactModel(hook.Codec(ss[0]), ws[0]), newExactModel(hook.Codec(ss[c.other]), ws[c.other])}
			for i, evs := range [][]ev{c.short, c.long} {
				s := ss[0]
				if i == 1 {
					s = ss[c.other]
				}
				for _, e := range evs {
					_, ok := models[i].add(t0.Add(e.at), e.delta)
					require.True(t, ok)
					_, err := s.At(t0.Add(e.at)).Add(ctx, c.name, e.delta)
					require.NoError(t, err, c.name)
				}
			}
			require.Equal(t, c.retry, groupRetry(models, now, 1, c.limits), c.name)
			d, err := allowAllAt(ctx, now, 1, store.Quota{Store: ss[0], Key: c.name, Limit: c.limits[0]},
				store.Quota{Store: ss[c.other], Key: c.name, Limit: c.limits[1]})
			require.NoError(t, err, c.name)
			require.False(t, d.Allowed, c.name)
			require.Equal(t, c.retry, d.RetryAfter, c.name)
			require.True(t, d.Policies[0].Allowed, c.name)
			require.Equal(t, c.shortSum, d.Policies[0].Sum, c.name)
			require.False(t, d.Policies[1].Allowed, c.name)
			require.Equal(t, c.otherSum, d.Policies[1].Sum, c.name)
			require.Equal(t, c.ownRetry, d.Policies[1].RetryAfter, c.name)
		}
	})
}
