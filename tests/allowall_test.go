package tests

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/limit"
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

// linkStores are two stores for decisions across entities on one server:
// a and b share a client, so their batches are linked in one script call;
// c is a store of the same prefix and window on a client of its own, so a
// decision between a and c goes through the reservation protocol (reserve,
// then undo), as across cluster slots.
func linkStores(t *testing.T, tg target, w store.Window, opts ...store.Option) (a, b, c *store.Store, srv *harness.Server) {
	t.Helper()
	a, srv = newStore(t, tg, w, opts...)
	b = a
	opts = append([]store.Option{store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend)}, opts...)
	c, err := store.New(ctxT(t), srv.Client(t), w, opts...)
	require.NoError(t, err)
	return a, b, c, srv
}

// checkLinked checks AllowAll across keys of different slots on stores a
// and b: a refusal by one policy leaves no count on the others, each
// policy's own decision is reported, and a retry once the limit has room is
// admitted.
func checkLinked(t *testing.T, a, b *store.Store) {
	ctx := ctxT(t)
	pol := func(user, ip string) []store.Quota {
		return []store.Quota{{Store: a, Key: user, Limit: 3}, {Store: b, Key: ip, Limit: 5}}
	}
	sum := func(s *store.Store, key string) int64 {
		n, err := s.Sum(ctx, key)
		require.NoError(t, err)
		return n
	}
	for i := range 3 {
		d, err := store.AllowAll(ctx, 1, pol("user:1", "ip:1")...)
		require.NoError(t, err)
		require.True(t, d.Allowed, "call %d", i)
	}
	d, err := store.AllowAll(ctx, 1, pol("user:1", "ip:1")...)
	require.NoError(t, err)
	require.False(t, d.Allowed, "the user's limit of 3 refuses the 4th")
	require.True(t, strings.HasPrefix(d.Policy, "user:1"), d.Policy)
	require.Greater(t, d.RetryAfter, time.Duration(0))
	require.Len(t, d.Policies, 2)
	require.False(t, d.Policies[0].Allowed)
	require.True(t, d.Policies[1].Allowed, "the IP's own limit admitted")
	require.Equal(t, store.Decision{Allowed: true, Limit: 5, Sum: 3, Remaining: 2, ResetAfter: d.Policies[1].ResetAfter,
		Policy: d.Policies[1].Policy}, d.Policies[1], "the IP's figures without the refused cost")
	require.EqualValues(t, 3, sum(a, "user:1"))
	require.EqualValues(t, 3, sum(b, "ip:1"), "the refused request left no count on the IP")

	// The IP refuses now: the new user's count stays 0.
	for range 2 {
		dd, err := b.Allow(ctx, "ip:1", 5, 1)
		require.NoError(t, err)
		require.True(t, dd.Allowed)
	}
	d, err = store.AllowAll(ctx, 1, pol("user:2", "ip:1")...)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.True(t, strings.HasPrefix(d.Policy, "ip:1"), d.Policy)
	require.EqualValues(t, 0, sum(a, "user:2"), "the refused request left no count on the user")
	require.EqualValues(t, 5, sum(b, "ip:1"))
	// A cost above a limit never fits: RetryAfter -1.
	d, err = store.AllowAll(ctx, 4, pol("user:3", "ip:2")...)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, time.Duration(-1), d.RetryAfter)
	require.EqualValues(t, 0, sum(b, "ip:2"))
}

// TestLinkAllOrNothing: AllowAll across keys of different slots is all or
// nothing on every backend, linked in one script (one client) and through
// the reservation protocol (two clients).
func TestLinkAllOrNothing(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		a, b, c, _ := linkStores(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		t.Run("one script", func(t *testing.T) { checkLinked(t, a, b) })
		t.Run("reservations", func(t *testing.T) { checkLinked(t, a.Sub("r"), c.Sub("r")) })
	})
}

// linkRace races callers deciding one cost across three policies (keys of
// three slots) whose tightest limit is max: exactly max are admitted, and
// every key counts exactly the admitted costs.
func linkRace(t *testing.T, ctx context.Context, stores [3]*store.Store, tag string, max int) {
	const callers = 40
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	keys := [3]string{"user:" + tag, "ip:" + tag, "device:" + tag}
	for range callers {
		wg.Go(func() {
			<-start
			d, err := store.AllowAll(ctx, 2,
				store.Quota{Store: stores[0], Key: keys[0], Limit: 1000},
				store.Quota{Store: stores[1], Key: keys[1], Limit: int64(2 * max)},
				store.Quota{Store: stores[2], Key: keys[2], Limit: 1000})
			require.NoError(t, err)
			if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, max, admitted.Load(), "exactly max of %d racing callers admitted", callers)
	for i, s := range stores {
		n, err := s.Sum(ctx, keys[i])
		require.NoError(t, err)
		require.EqualValues(t, 2*max, n, "%s counts exactly the admitted costs", keys[i])
	}
}

// TestLinkRace: 40 callers race on a decision across three slots, on every
// backend, linked and through reservations: exactly the limit is admitted,
// and the refused costs left nothing.
func TestLinkRace(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		a, _, c, _ := linkStores(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		linkRace(t, ctxT(t), [3]*store.Store{a, a, a}, "one", 7)
		linkRace(t, ctxT(t), [3]*store.Store{a, c, a}, "rsv", 7)
	})
}

// TestLinkCluster: on a real Redis Cluster, decisions across slots on three
// masters are all or nothing under a race of 40 callers, and a refusal by
// one slot is taken back in the others.
func TestLinkCluster(t *testing.T) {
	t.Parallel()
	cl := harness.NewCluster(t)
	ctx := ctxT(t)
	s, err := store.New(ctx, cl.Client(t), store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(harness.Prefix(t)))
	require.NoError(t, err)
	checkLinked(t, s, s)
	for i := range 3 {
		linkRace(t, ctx, [3]*store.Store{s, s, s}, "race"+strconv.Itoa(i), 5+i)
	}
}

// TestLinkRecord: features.Set.Record decides the limits of every entity as
// one: an event refused by the user's limit counts nothing on the device's
// limit, while counts (unconditional) count it; a redelivered admitted event
// is a duplicate; on every backend. With an event id, without one (each
// entity's batch on the fast path), and for limits alone.
func TestLinkRecord(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := newStoreServer(t, tg)
		ctx := ctxT(t)
		w := []store.Window{{Length: time.Minute, Bucket: time.Second}}
		set, err := features.New(ctx, srv.Client(t), []features.Feature{
			{Name: "user_limit", Entity: "user", Kind: features.Limit, Limits: []int64{2}, Windows: w},
			{Name: "device_limit", Entity: "device", Kind: features.Limit, Limits: []int64{10}, Windows: w},
			{Name: "device_logins", Entity: "device", Kind: features.Count, Windows: w},
		}, store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		ev := func(i int) features.Event {
			return features.Event{ID: "e" + strconv.Itoa(i), Entities: map[string]string{"user": "42", "device": "d7"}}
		}
		// Four events: two admitted, then two refused by the user's limit.
		four := func(set *features.Set, id bool) {
			for i := range 4 {
				e := ev(i)
				if !id {
					e.ID = ""
				}
				res, err := set.Record(ctx, e)
				require.NoError(t, err)
				require.Equal(t, i < 2, res.Allowed, "event %d", i)
				dev, _ := res.Get("device_limit")
				logins, _ := res.Get("device_logins")
				require.EqualValues(t, min(i+1, 2), dev.Sum, "event %d: the device's limit counts admitted events only", i)
				require.Equal(t, i < 2, dev.Counted)
				require.EqualValues(t, i+1, logins.Sum, "counts count every event")
				if i >= 2 {
					require.Equal(t, []string{"user_limit"}, res.RefusedBy)
				}
			}
		}
		four(set, true)
		// Redelivered: the admitted one is a duplicate; the refused one is
		// decided anew (refused again, still counting nothing).
		res, err := set.Record(ctx, ev(1))
		require.NoError(t, err)
		require.True(t, res.Allowed)
		require.True(t, res.Duplicate)
		res, err = set.Record(ctx, ev(3))
		require.NoError(t, err)
		require.False(t, res.Allowed)
		r, err := set.Read(ctx, map[string]string{"user": "42", "device": "d7"})
		require.NoError(t, err)
		dev, _ := r.Get("device_limit")
		logins, _ := r.Get("device_logins")
		require.EqualValues(t, 2, dev.Sum)
		require.EqualValues(t, 4, logins.Sum, "the redelivered refused event counted once")

		// Without an id (each entity's group on the fast group's path): the
		// same decisions; a refusal takes the device's limit back and keeps
		// its count.
		noid, err := features.New(ctx, srv.Client(t), []features.Feature{
			{Name: "user_limit", Entity: "user", Kind: features.Limit, Limits: []int64{2}, Windows: w},
			{Name: "device_limit", Entity: "device", Kind: features.Limit, Limits: []int64{10}, Windows: w},
			{Name: "device_logins", Entity: "device", Kind: features.Count, Windows: w},
		}, store.WithPrefix(harness.Prefix(t)+"noid:"), store.WithBackend(tg.backend))
		require.NoError(t, err)
		four(noid, false)

		// Limits alone (the script's fast path for a link of limits is for
		// those without an id): a redelivered admitted event is a duplicate
		// and counts once.
		only, err := features.New(ctx, srv.Client(t), []features.Feature{
			{Name: "user_limit", Entity: "user", Kind: features.Limit, Limits: []int64{2}, Windows: w},
			{Name: "device_limit", Entity: "device", Kind: features.Limit, Limits: []int64{10}, Windows: w},
		}, store.WithPrefix(harness.Prefix(t)+"only:"), store.WithBackend(tg.backend))
		require.NoError(t, err)
		for i := range 2 {
			res, err := only.Record(ctx, ev(0))
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, i == 1, res.Duplicate, "delivery %d", i)
			dev, _ := res.Get("device_limit")
			require.EqualValues(t, 1, dev.Sum, "delivery %d: the event counts once", i)
		}
	})
}

// TestLinkLease: an Acquire is a limit of a linked decision: a refusal by
// another entity's rate limit takes the lease back, and a full lease set
// counts nothing on the other entity.
func TestLinkLease(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		a, _, c, _ := linkStores(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		for name, other := range map[string]*store.Store{"one script": a, "reservations": c} {
			cc, err := limit.NewConcurrency(a, "jobs"+strings.ReplaceAll(name, " ", ""), 1, time.Minute)
			require.NoError(t, err)
			apply := func(ipLimit int64) []store.BatchResult {
				res, err := store.ApplyAll(ctx,
					store.Batch{Ops: []store.Op{cc.Op("user:1", "")}},
					store.Batch{Ops: []store.Op{{Store: other, Key: "ip:" + name, Kind: store.OpLimit, Limit: ipLimit, Delta: 1}}})
				require.NoError(t, err)
				return res
			}
			res := apply(0) // the IP refuses: the lease is taken back
			require.False(t, res[0].Allowed)
			require.False(t, res[1].Allowed)
			require.Equal(t, -1, res[0].RefusedBy)
			require.Equal(t, 0, res[1].RefusedBy)
			require.False(t, res[0].Values[0].Counted)
			require.EqualValues(t, 0, res[0].Values[0].Sum, "%s: no lease held", name)
			res = apply(10)
			require.True(t, res[0].Allowed && res[1].Allowed, name)
			require.EqualValues(t, 1, res[0].Values[0].Sum)
			res = apply(10) // the lease set is full: the IP counts nothing
			require.False(t, res[0].Allowed)
			require.Equal(t, 0, res[0].RefusedBy)
			n, err := other.Sum(ctx, "ip:"+name)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, name)
		}
	})
}

// TestLinkChaos: on a real Redis Cluster, 40 callers record login events
// limited per user, per IP and per device at once (three entities, spread
// over the masters), while every client connection of a master is killed
// every few milliseconds (between a reservation and its undo, among other
// places) and a master is failed over to its replica (CLUSTER FAILOVER).
// Events that failed are retried with their id until they answer. Then
// every entity's limit holds exactly the events finally admitted that name
// it: no limit admitted more than its limit, and every refused event's net
// count is zero on every entity. It logs how many refusals came from a limit
// that never filled: refusals by reservations that were later taken back.
func TestLinkChaos(t *testing.T) {
	t.Parallel()
	cl := harness.NewCluster(t)
	ctx := ctxT(t)
	c := cl.Client(t)
	w := []store.Window{{Length: 10 * time.Minute, Bucket: time.Second}}
	limits := map[string]int64{"user": 5, "ip": 150, "device": 100}
	values := map[string]int{"user": 100, "ip": 3, "device": 5}
	var fs []features.Feature
	for _, e := range []string{"user", "ip", "device"} {
		fs = append(fs, features.Feature{Name: e + "_limit", Entity: e, Kind: features.Limit, Limits: []int64{limits[e]}, Windows: w})
	}
	set, err := features.New(ctx, c, fs, store.WithPrefix(harness.Prefix(t)), store.WithRetries(1))
	require.NoError(t, err)

	type event struct {
		id       string
		entities map[string]string
		res      features.Result
		err      error
	}
	const callers = 40
	var mu sync.Mutex
	var events []*event
	rng := rand.New(rand.NewPCG(1, 2))
	newEvent := func() *event {
		mu.Lock()
		defer mu.Unlock()
		i := len(events)
		ents := map[string]string{}
		for e, n := range values {
			ents[e] = strconv.Itoa(rng.IntN(n))
		}
		ev := &event{id: "ev" + strconv.Itoa(i), entities: ents}
		events = append(events, ev)
		return ev
	}
	var failures atomic.Int64 // calls that failed during the chaos
	record := func(ev *event) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ev.res, ev.err = set.Record(cctx, features.Event{ID: ev.id, Entities: ev.entities})
		if ev.err != nil {
			failures.Add(1)
		}
	}

	// Chaos: kill the masters' client connections, and fail one over.
	stop := make(chan struct{})
	var kills atomic.Int64
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			for _, n := range cl.Nodes {
				if out, err := n.Try(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err == nil {
					if k, err := strconv.Atoi(strings.TrimSpace(out)); err == nil {
						kills.Add(int64(k))
					}
				}
			}
		}
	})
	var failedOver atomic.Bool
	chaos.Go(func() {
		time.Sleep(300 * time.Millisecond)
		// Node 3 replicates node 0: a graceful failover, no acknowledged write lost.
		if _, err := cl.Nodes[3].Try(ctx, "CLUSTER", "FAILOVER"); err != nil {
			t.Logf("CLUSTER FAILOVER: %v", err)
			return
		}
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if out, err := cl.Nodes[3].Try(ctx, "ROLE"); err == nil && strings.HasPrefix(out, "master") {
				failedOver.Store(true)
				return
			}
		}
	})
	// The callers record events until the failover is over, and a second
	// more, and until a call has failed (on a loaded machine the kills may
	// take a while to hit a call that its retry does not save).
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range callers {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				record(newEvent())
				time.Sleep(time.Millisecond)
			}
		})
	}
	for deadline := time.Now().Add(15 * time.Second); !failedOver.Load() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	for deadline := time.Now().Add(20 * time.Second); failures.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	close(stop)
	chaos.Wait()
	require.True(t, failedOver.Load(), "node 3 never became a master")
	cl.WaitOK(t, 30*time.Second)

	// Settle: retry every failed event with its id until it answers.
	failed := 0
	for _, ev := range events {
		if ev.err == nil {
			continue
		}
		failed++
		for deadline := time.Now().Add(30 * time.Second); ev.err != nil; {
			require.True(t, time.Now().Before(deadline), "event %s never settled: %v", ev.id, ev.err)
			time.Sleep(20 * time.Millisecond)
			record(ev)
		}
	}
	admitted := map[string]int64{} // by feature and entity value
	var nAdmitted, refusals, spurious int
	for _, ev := range events {
		if ev.res.Allowed {
			nAdmitted++
			for e, v := range ev.entities {
				admitted[e+"_limit/"+v]++
			}
		}
	}
	for _, ev := range events {
		for _, f := range ev.res.RefusedBy {
			refusals++
			e := strings.TrimSuffix(f, "_limit")
			if admitted[f+"/"+ev.entities[e]] < limits[e] {
				spurious++
			}
		}
	}
	for e, n := range values {
		for v := range n {
			var r features.Result
			require.Eventually(t, func() bool { // a read is not resent after a killed connection
				r, err = set.Read(ctx, map[string]string{e: strconv.Itoa(v)})
				return err == nil
			}, 10*time.Second, 20*time.Millisecond, "%v", err)
			got, _ := r.Get(e + "_limit")
			want := admitted[e+"_limit/"+strconv.Itoa(v)]
			require.EqualValues(t, want, got.Sum, "%s %d: its limit holds exactly the admitted events", e, v)
			require.LessOrEqual(t, got.Sum, limits[e], "%s %d admitted more than its limit", e, v)
		}
	}
	t.Logf("CHAOS: %d events, %d admitted; %d connections killed, a master failed over; %d events failed and were retried with their id until they answered",
		len(events), nAdmitted, kills.Load(), failed)
	t.Logf("CONTENTION: %d of %d refusals came from a limit that never filled (a reservation, later taken back, refused them)", spurious, refusals)
	require.Positive(t, kills.Load(), "no connection was killed")
	require.Positive(t, failed, "no event failed: the chaos did not reach the callers")
}

// windowctlPolicies drives `windowctl allow --policy` through addr (a
// server, or a cluster's seeds): all or nothing across keys, each policy's
// figures, a refusal exits 3 and counts nothing on the admitting key, bad
// input exits 2.
func windowctlPolicies(t *testing.T, addr ...string) {
	prefix := "--prefix=" + harness.Prefix(t)
	allow := func(args ...string) (map[string]any, int) {
		a := append(append([]string{}, addr...), prefix, "--json", "allow")
		out, errs, code := ctlRaw(t, append(a, args...)...)
		require.Contains(t, []int{0, 3}, code, errs)
		return jsonLine(t, out), code
	}
	for i := range 2 {
		r, code := allow("--policy", "user:42=2/1m", "--policy", "ip:9=5/10m")
		require.Zero(t, code, "call %d", i)
		require.Equal(t, true, r["allowed"])
	}
	r, code := allow("--policy", "user:42=2/1m", "--policy", "ip:9=5/10m")
	require.Equal(t, 3, code, "a refusal exits 3")
	require.Equal(t, false, r["allowed"])
	require.Greater(t, r["retry_after_ms"], 0.0)
	ps, _ := r["policies"].([]any)
	require.Len(t, ps, 2)
	user, _ := ps[0].(map[string]any)
	ip, _ := ps[1].(map[string]any)
	require.Equal(t, map[string]any{"key": "user:42", "limit": 2.0, "window_ms": 60000.0, "sum": 2.0, "remaining": 0.0,
		"retry_after_ms": r["retry_after_ms"]}, user)
	require.Equal(t, map[string]any{"key": "ip:9", "limit": 5.0, "window_ms": 600000.0, "sum": 2.0, "remaining": 3.0,
		"retry_after_ms": 0.0}, ip, "the refused cost left no count on the IP")
	// Another user on the same IP: admitted, with a COST of 3.
	r, code = allow("--policy", "user:7=5/1m", "--policy", "ip:9=5/10m", "3")
	require.Zero(t, code)
	ps, _ = r["policies"].([]any)
	ip, _ = ps[1].(map[string]any)
	require.Equal(t, 5.0, ip["sum"])
	for _, bad := range [][]string{
		{"--policy", "user:42"},
		{"--policy", "user:42=x/1m"},
		{"--policy", "user:42=2/1m", "--limit", "3", "k"},
		{"--policy", "user:42=2/1m", "--policy", "user:42=3/1m"},
		{"--policy", "user:42=2/1500ms"},
		{"--policy", "user:42=2/1m", "1", "2"},
	} {
		a := append(append([]string{}, addr...), prefix, "allow")
		_, errs, code := ctlRaw(t, append(a, bad...)...)
		require.Equal(t, 2, code, "%v: %s", bad, errs)
	}
}

// TestWindowctlAllowPolicies: `windowctl allow --policy` on a server and on
// a real Redis Cluster (keys of three slots).
func TestWindowctlAllowPolicies(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		windowctlPolicies(t, "--addr", harness.Shared(t, harness.Redis70).URL())
	})
	t.Run("cluster", func(t *testing.T) {
		windowctlPolicies(t, "--addr", harness.NewCluster(t).Seeds()[0])
	})
}

// TestLinkFailure: a batch that fails (its key holds another type) refuses
// the decision: the other key's cost is taken back, linked in one script and
// through reservations, on every backend.
func TestLinkFailure(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		a, _, c, srv := linkStores(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		for name, other := range map[string]*store.Store{"one script": a, "reservations": c} {
			bad := "bad:" + strings.ReplaceAll(name, " ", "")
			srv.Cmd(t, "SET", counterKey(t, other, bad), "not a counter")
			user := "user:" + bad
			_, err := store.AllowAll(ctx, 1, store.Quota{Store: a, Key: user, Limit: 5}, store.Quota{Store: other, Key: bad, Limit: 5})
			require.ErrorIs(t, err, store.ErrWrongType, name)
			n, err := a.Sum(ctx, user)
			require.NoError(t, err)
			require.Zero(t, n, "%s: the failed decision left a count on the user", name)
		}
	})
}

// TestFaultLink: the protocol of an event whose parts go through different
// clients (one call each: a check, a reservation, an undo) when a reply is
// lost (the server ran the write, the connection dropped), through a proxy
// that cuts it, on every backend. The proxied key admits and the direct one
// refuses:
//   - the check's reply is lost and the store does not resend it
//     (WithRetries(0)): the event fails, and nothing was written;
//   - the reservation's reply is lost, then resent: a duplicate of itself,
//     which the undo still takes back;
//   - the undo's reply is lost: it is resent (and does nothing the second
//     time): the decision is a refusal, not an error.
func TestFaultLink(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		e := newFaultEnv(t, tg)
		ctx := ctxT(t)
		for _, tc := range []struct {
			name          string
			retries, skip int64
		}{{"check lost, no resend", 0, 0}, {"reserve lost, resent", 3, 1}, {"undo lost, resent", 3, 2}} {
			px, direct := e.stores(t, minuteWin, store.WithRetries(int(tc.retries)))
			key := "user:" + strings.ReplaceAll(tc.name, " ", "")
			// The proxied store's first write is the check, its second the
			// reservation, its third the undo (or a write resent).
			e.px.skip.Store(tc.skip)
			e.px.arm(1, nil)
			res, err := store.ApplyAll(ctx,
				store.Batch{Ops: []store.Op{{Store: px, Key: key, Kind: store.OpLimit, Limit: 5, Delta: 1}}},
				store.Batch{Ops: []store.Op{{Store: direct, Key: "ip:" + key, Kind: store.OpLimit, Limit: 0, Delta: 1}}})
			if tc.retries == 0 {
				require.Error(t, err, tc.name)
				require.ErrorContains(t, err, "nothing was written", tc.name)
			} else {
				require.NoError(t, err, tc.name)
				require.False(t, res[0].Allowed)
				require.False(t, res[0].Values[0].Counted, tc.name)
				require.EqualValues(t, 0, res[0].Values[0].Sum, "%s: the answer is the sum after the undo", tc.name)
			}
			require.EqualValues(t, 1, e.px.answered.Load(), "%s: the cut write ran on the server", tc.name)
			e.px.answered.Store(0)
			require.EqualValues(t, 0, sumOf(t, ctx, direct, key), "%s: the reservation was taken back", tc.name)
		}
	})
}
