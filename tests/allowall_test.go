package tests

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

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

// TestAllowAllOneKeyTwiceAcrossKeys: 40 callers race an AllowAll of two
// windows of one key (stores of one prefix: one head) and a third key: the
// tighter window admits exactly its limit.
func TestAllowAllOneKeyTwiceAcrossKeys(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := harness.Shared(t, tg.kind)
		opts := []store.Option{store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend)}
		c := srv.Client(t)
		minute, err := store.New(ctxT(t), c, store.Window{Length: time.Minute, Bucket: time.Second}, opts...)
		require.NoError(t, err)
		hour, err := store.New(ctxT(t), c, store.Window{Length: time.Hour, Bucket: time.Minute}, opts...)
		require.NoError(t, err)
		ctx := ctxT(t)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				for range 3 {
					d, err := store.AllowAll(ctx, 1, store.Quota{Store: minute, Key: "k", Limit: 3},
						store.Quota{Store: hour, Key: "k", Limit: 50}, store.Quota{Store: minute, Key: "ip", Limit: 100})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		require.EqualValues(t, 3, admitted.Load())
		for _, c := range []struct {
			s   *store.Store
			key string
		}{{minute, "k"}, {hour, "k"}, {minute, "ip"}} {
			n, err := c.s.Sum(ctx, c.key)
			require.NoError(t, err)
			require.EqualValues(t, 3, n, "%s %v", c.key, c.s.Window())
		}
	})
}
