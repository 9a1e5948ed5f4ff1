package tests

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

// exactModel is an independent model of one counter in big integers: the
// value of every bucket ever written, by bucket start. It knows nothing of
// doubles, running totals or sweeps.
type exactModel struct {
	codec   *codec.Codec
	w       store.Window
	buckets map[int64]*big.Int // bucket start (Unix ms) -> value
}

func newExactModel(c *codec.Codec, w store.Window) *exactModel {
	return &exactModel{codec: c, w: w, buckets: map[int64]*big.Int{}}
}

var (
	bigMaxInt64 = big.NewInt(math.MaxInt64)
	bigMinInt64 = big.NewInt(math.MinInt64)
)

func fitsInt64(v *big.Int) bool { return v.Cmp(bigMinInt64) >= 0 && v.Cmp(bigMaxInt64) <= 0 }

func (m *exactModel) start(at time.Time) int64 {
	_, s, _ := m.codec.Bounds(at)
	return s.UnixMilli()
}

// live lists the starts of the buckets live at now for a lookback, oldest first.
func (m *exactModel) live(now time.Time, lb time.Duration) []int64 {
	var out []int64
	thr := now.Add(-lb).UnixMilli()
	for s := range m.buckets {
		if s > thr && s <= now.UnixMilli() {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func (m *exactModel) sum(now time.Time, lb time.Duration) *big.Int {
	t := new(big.Int)
	for _, s := range m.live(now, lb) {
		t.Add(t, m.buckets[s])
	}
	return t
}

func (m *exactModel) value(s int64) *big.Int {
	if v := m.buckets[s]; v != nil {
		return v
	}
	return new(big.Int)
}

// add is what Add must do: the new window sum, or false when the window sum
// or the bucket would leave int64 (then nothing changes).
func (m *exactModel) add(now time.Time, delta int64) (*big.Int, bool) {
	s := m.start(now)
	sum := new(big.Int).Add(m.sum(now, m.w.Length), big.NewInt(delta))
	b := new(big.Int).Add(m.value(s), big.NewInt(delta))
	if !fitsInt64(sum) || !fitsInt64(b) {
		return nil, false
	}
	m.buckets[s] = b
	return sum, true
}

// allow is what Allow must answer, exactly; ok false when it must fail with
// ErrOverflow (the window sum, or the bucket it would write, leaves int64).
func (m *exactModel) allow(now time.Time, limit, cost int64) (r store.Decision, ok bool) {
	sum := m.sum(now, m.w.Length)
	if !fitsInt64(sum) {
		return r, false
	}
	r.Limit = limit
	fits := cost <= limit && new(big.Int).Add(sum, big.NewInt(cost)).Cmp(big.NewInt(limit)) <= 0
	if fits {
		if cost > 0 {
			s := m.start(now)
			b := new(big.Int).Add(m.value(s), big.NewInt(cost))
			if !fitsInt64(b) {
				return r, false
			}
			m.buckets[s] = b
		}
		r.Allowed = true
		sum.Add(sum, big.NewInt(cost))
	}
	r.Sum = sum.Int64()
	switch {
	case sum.Sign() <= 0:
		r.Remaining = limit
	case sum.Cmp(big.NewInt(limit)) >= 0:
		r.Remaining = 0
	default:
		r.Remaining = limit - sum.Int64()
	}
	live := m.live(now, m.w.Length)
	w := m.w.Length.Milliseconds()
	for i := len(live) - 1; i >= 0; i-- {
		if m.buckets[live[i]].Sign() != 0 {
			r.ResetAfter = time.Duration(live[i]+w-now.UnixMilli()) * time.Millisecond
			break
		}
	}
	if !fits {
		r.RetryAfter = -1
		if cost <= limit {
			rem := new(big.Int).Set(sum)
			for _, s := range live {
				rem.Sub(rem, m.buckets[s])
				if new(big.Int).Add(rem, big.NewInt(cost)).Cmp(big.NewInt(limit)) <= 0 {
					r.RetryAfter = time.Duration(s+w-now.UnixMilli()) * time.Millisecond
					break
				}
			}
		}
	}
	return r, true
}

// hugeValue draws amounts that stress doubles: around ±2^52, ±2^53, ±2^62,
// the int64 limits, and small ones.
func hugeValue(rng *rand.Rand) int64 {
	small := rng.Int64N(7) - 3
	switch rng.IntN(9) {
	case 0:
		return 1<<52 + small
	case 1:
		return -(1 << 52) + small
	case 2:
		return 1<<53 + small
	case 3:
		return -(1 << 53) + small
	case 4:
		return 1<<62 + small
	case 5:
		return -(1 << 62) + small
	case 6:
		return math.MaxInt64 - rng.Int64N(4)
	case 7:
		return math.MinInt64 + rng.Int64N(4)
	}
	return small * 5
}

// TestExactReproduction is the reproduction: sums whose partial sums
// pass 2^53 and come back, on every backend.
func TestExactReproduction(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		// Two policies on one key (one slot): a group of limits, ws_limits.
		ss := policyStores(t, tg, w, store.Window{Length: time.Minute, Bucket: 10 * time.Second})
		s := ss[0]
		ctx := ctxT(t)
		t0 := utc("2026-06-01T12:00:00Z")
		for i := 0; i < 3; i++ {
			_, err := s.At(t0.Add(time.Duration(i)*time.Second)).Add(ctx, "r", 1<<52+1)
			require.NoError(t, err)
		}
		var n int64
		var err error
		for i := 3; i < 6; i++ {
			n, err = s.At(t0.Add(time.Duration(i)*time.Second)).Add(ctx, "r", -(1 << 52))
			require.NoError(t, err)
		}
		require.EqualValues(t, 3, n, "Add")
		at := t0.Add(5500 * time.Millisecond)
		n, err = s.At(at).Sum(ctx, "r")
		require.NoError(t, err)
		require.EqualValues(t, 3, n, "Sum")
		n, err = s.At(at).Over(w.Length).Sum(ctx, "r")
		require.NoError(t, err)
		require.EqualValues(t, 3, n, "SumWithin")
		sums, err := s.At(at).SumMany(ctx, []string{"r"})
		require.NoError(t, err)
		require.Equal(t, []int64{3}, sums, "SumMany")
		r, err := s.At(at).Allow(ctx, "r", 3, 0)
		require.NoError(t, err)
		require.True(t, r.Allowed, "Allow(limit 3, cost 0) on a sum of 3")
		require.EqualValues(t, 3, r.Sum)
		n, err = s.At(t0.Add(6*time.Second)).Add(ctx, "r", 5)
		require.NoError(t, err)
		require.EqualValues(t, 8, n)
		// The sweep at +15.5s takes off the buckets of +0s..+5s: 3, exactly.
		n, err = s.At(t0.Add(15500*time.Millisecond)).Add(ctx, "r", 1)
		require.NoError(t, err)
		require.EqualValues(t, 6, n, "the running total lost a unit in the sweep")
		n, err = s.At(t0.Add(15600*time.Millisecond)).Sum(ctx, "r")
		require.NoError(t, err)
		require.EqualValues(t, 6, n)
	})
}

// TestExactRandomWalk plays random streams of amounts near ±2^52, ±2^53,
// ±2^62 and the int64 limits, with mixed signs and gaps that make the plain
// hash sweep one by one, rebuild, or start over, and checks every Add, Sum,
// SumWithin, SumMany and Allow answer (sum, remaining, retry-after,
// reset-after, overflow) against big-integer arithmetic, on every backend.
func TestExactRandomWalk(t *testing.T) {
	forEachWalk(t, []walkShape{
		{"10s of 1s", store.Window{Length: 10 * time.Second, Bucket: time.Second}, "2026-03-01T10:00:00Z"},
		{"year end, 7s buckets", store.Window{Length: 70 * time.Second, Bucket: 7 * time.Second}, "2025-12-31T23:58:00Z"},
	}, exactWalk)
}

// walkShape is a window a random walk plays on, from an instant (RFC 3339).
type walkShape struct {
	name string
	w    store.Window
	from string
}

// forEachWalk runs walk on every backend, for each shape and the seeds 1 to
// 3 (each shape's seeds its own).
func forEachWalk(t *testing.T, shapes []walkShape, walk func(t *testing.T, tg target, w store.Window, at time.Time, seed uint64)) {
	forEach(t, func(t *testing.T, tg target) {
		for si, sh := range shapes {
			for seed := uint64(1); seed <= 3; seed++ {
				t.Run(fmt.Sprintf("%s/seed%d", sh.name, seed), func(t *testing.T) {
					walk(t, tg, sh.w, utc(sh.from), seed*10+uint64(si))
				})
			}
		}
	})
}

func exactWalk(t *testing.T, tg target, w store.Window, at time.Time, seed uint64) {
	s, _ := newStore(t, tg, w)
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(seed, 53))
	m := newExactModel(hook.Codec(s), w)
	seen := map[string]int{}
	defer func() { t.Logf("outcomes: %v", seen) }()
	for i := 0; i < 300; i++ {
		switch r := rng.IntN(20); {
		case r < 8:
			at = at.Add(time.Duration(rng.Int64N(int64(w.Bucket))))
		case r < 16:
			at = at.Add(time.Duration(rng.Int64N(int64(4 * w.Bucket))))
		case r < 19:
			at = at.Add(w.Bucket * time.Duration(33+rng.IntN(20)))
		default:
			at = at.Add(w.Length + time.Duration(rng.Int64N(int64(w.Length))))
		}
		step := fmt.Sprintf("step %d at %v", i, at.Format(time.RFC3339Nano))
		switch op := rng.IntN(10); {
		case op < 5:
			delta := hugeValue(rng)
			want, ok := m.add(at, delta)
			got, err := s.At(at).Add(ctx, "x", delta)
			if !ok {
				require.ErrorIs(t, err, store.ErrOverflow, "%s: Add %d must overflow", step, delta)
				seen["add overflow"]++
				continue
			}
			require.NoError(t, err, "%s: Add %d", step, delta)
			seen[fmt.Sprintf("add, sum beyond 2^53: %v", want.CmpAbs(big.NewInt(1<<53)) >= 0)]++
			require.Equal(t, want.Int64(), got, "%s: Add %d", step, delta)
		case op < 7:
			want := m.sum(at, w.Length)
			got, err := s.At(at).Sum(ctx, "x")
			many, errMany := s.At(at).SumMany(ctx, []string{"x", "none"})
			if !fitsInt64(want) {
				seen["sum overflow"]++
				require.ErrorIs(t, err, store.ErrOverflow, "%s: Sum of %v", step, want)
				require.ErrorIs(t, errMany, store.ErrOverflow, "%s: SumMany of %v", step, want)
				continue
			}
			require.NoError(t, err, step)
			require.Equal(t, want.Int64(), got, "%s: Sum", step)
			require.NoError(t, errMany, step)
			require.Equal(t, []int64{want.Int64(), 0}, many, "%s: SumMany", step)
			lb := w.Bucket * time.Duration(1+rng.IntN(int(w.Length/w.Bucket)))
			want = m.sum(at, lb)
			got, err = s.At(at).Over(lb).Sum(ctx, "x")
			if !fitsInt64(want) {
				require.ErrorIs(t, err, store.ErrOverflow, "%s: SumWithin %v of %v", step, lb, want)
				continue
			}
			require.NoError(t, err, step)
			require.Equal(t, want.Int64(), got, "%s: SumWithin %v", step, lb)
		default:
			var limit, cost int64
			sum := m.sum(at, w.Length)
			switch rng.IntN(3) {
			case 0: // around the sum, where the decision is close
				limit = max(0, min(1<<53, sum.Int64()+rng.Int64N(9)-4))
				if !sum.IsInt64() {
					limit = rng.Int64N(1 << 53)
				}
				cost = rng.Int64N(6)
			case 1:
				limit, cost = rng.Int64N(1<<53), rng.Int64N(1<<53)
			default:
				limit, cost = 1<<53, rng.Int64N(4)
			}
			want, ok := m.allow(at, limit, cost)
			got, err := s.At(at).Allow(ctx, "x", limit, cost)
			if !ok {
				require.ErrorIs(t, err, store.ErrOverflow, "%s: Allow(%d, %d) on %v", step, limit, cost, sum)
				continue
			}
			require.NoError(t, err, "%s: Allow(%d, %d) on %v", step, limit, cost, sum)
			seen[fmt.Sprintf("allow %v, retry>0 %v", want.Allowed, want.RetryAfter > 0)]++
			require.Equal(t, want, got, "%s: Allow(%d, %d) on %v", step, limit, cost, sum)
		}
	}
	// Long after, everything has left, exactly.
	at = at.Add(w.Length + w.Bucket)
	n, err := s.At(at).Sum(ctx, "x")
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestHotPathBigBuckets: a bucket near 2^53 in a window whose sum is small
// (the other bucket holds credits) is exact on the hot paths of Add, Allow
// and AllowAll, which count on doubles only while every number stays below
// 2^53 (the plain hash's ws_fastopen): the bucket ends at 2^53 + 1, a value
// a double cannot hold, and the sum is 11. (AllowAll takes two policies on
// one key, so that they are a group of limits: ws_limits.)
func TestHotPathBigBuckets(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		// Two policies on one key (one slot): a group of limits, ws_limits.
		ss := policyStores(t, tg, w, store.Window{Length: time.Minute, Bucket: 10 * time.Second})
		s := ss[0]
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Minute).Add(-2 * time.Minute)
		count := map[string]func(at time.Time, key string) int64{
			"add": func(at time.Time, key string) int64 {
				n, err := s.At(at).Add(ctx, key, 3)
				require.NoError(t, err)
				return n
			},
			"allow": func(at time.Time, key string) int64 {
				d, err := s.At(at).Allow(ctx, key, 100, 3)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				return d.Sum
			},
			"allowall": func(at time.Time, key string) int64 {
				d, err := allowAllAt(ctx, at, 3, store.Quota{Store: s, Key: key, Limit: 100}, store.Quota{Store: ss[1], Key: key, Limit: 100})
				require.NoError(t, err)
				require.True(t, d.Allowed)
				return d.Policies[0].Sum
			},
		}
		for name, fn := range count {
			_, err := s.At(t0).Add(ctx, name, -(1<<53 - 10))
			require.NoError(t, err)
			_, err = s.At(t0.Add(time.Second)).Add(ctx, name, 1<<53-2)
			require.NoError(t, err)
			require.EqualValues(t, 11, fn(t0.Add(1200*time.Millisecond), name), name)
			snap, err := s.At(t0.Add(1300*time.Millisecond)).Inspect(ctx, name)
			require.NoError(t, err)
			var got []int64
			for _, b := range snap.Buckets {
				got = append(got, b.Value)
			}
			require.Equal(t, []int64{-(1<<53 - 10), 1<<53 + 1}, got, name)
			n, err := s.At(t0.Add(1300*time.Millisecond)).Sum(ctx, name)
			require.NoError(t, err)
			require.EqualValues(t, 11, n, name)
		}
	})
}

// TestRetryAtTwoToThe53 checks the retry of a refusal whose limit is 2^53,
// the largest Allow takes: "the rest of the sum plus the cost fits" must be
// decided exactly where the rest plus the cost is 2^53 + 1, a sum that
// doubles round to 2^53. Each counter holds a negative bucket, so that a
// group walks its limits' sums (the single limit's walk is the same either
// way), and the cost is 2^53: it fits only once the sum is 0 or less.
func TestRetryAtTwoToThe53(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ws := []store.Window{{Length: 10 * time.Second, Bucket: time.Second}, {Length: time.Minute, Bucket: 10 * time.Second}}
		ss := policyStores(t, tg, ws...)
		s := ss[0]
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Minute).Add(-2 * time.Minute)
		at := t0.Add(4100 * time.Millisecond)
		const max = int64(1) << 53
		calls := map[string]func(key string) (store.Decision, error){
			"Allow": func(key string) (store.Decision, error) { return s.At(at).Allow(ctx, key, max, max) },
			"AllowAll of two limits": func(key string) (store.Decision, error) {
				return allowAllAt(ctx, at, max, store.Quota{Store: s, Key: key, Limit: max}, store.Quota{Store: ss[1], Key: key, Limit: max})
			},
			"AllowAll of one limit": func(key string) (store.Decision, error) {
				return allowAllAt(ctx, at, max, store.Quota{Store: s, Key: key, Limit: max})
			},
		}
		for _, c := range []struct {
			name    string
			buckets []int64 // one per second from t0
			leaves  int     // the bucket whose leaving lets the cost in
		}{
			{"sum 1 after the first leaves", []int64{1, -1, 1, 1}, 3},
			{"sum 1 now", []int64{-1, 1, 1}, 2},
		} {
			for name, call := range calls {
				key := c.name + " " + name
				for i, v := range c.buckets {
					_, err := s.At(t0.Add(time.Duration(i)*time.Second)).Add(ctx, key, v)
					require.NoError(t, err)
				}
				d, err := call(key)
				require.NoError(t, err)
				require.False(t, d.Allowed, key)
				want := time.Duration(c.leaves)*time.Second + ws[0].Length - 4100*time.Millisecond
				require.Equal(t, want, d.RetryAfter, key)
			}
		}
	})
}

// TestRefusalRandomWalk plays refusals on dense windows against the exact
// model: a key kept near its limit, as a hammered key is, so that most
// refusals are settled by the counter's oldest and newest buckets, and the
// rest by the whole counter. Every decision (retry, reset, sum) must be the model's. The
// amounts are small and sometimes negative (credits), or near 2^52, where the
// magnitudes read add up past 2^53; windows of 60 and of 10 buckets, and
// one that crosses a year's end (7 s buckets: the year's last bucket is
// short).
func TestRefusalRandomWalk(t *testing.T) {
	forEachWalk(t, []walkShape{
		{"60s of 1s", store.Window{Length: time.Minute, Bucket: time.Second}, "2026-03-01T10:00:00Z"},
		{"10s of 1s", store.Window{Length: 10 * time.Second, Bucket: time.Second}, "2026-03-01T10:00:00Z"},
		{"year end, 7s buckets", store.Window{Length: 70 * time.Second, Bucket: 7 * time.Second}, "2025-12-31T23:59:00Z"},
	}, refusalWalk)
}

func refusalWalk(t *testing.T, tg target, w store.Window, at time.Time, seed uint64) {
	s, _ := newStore(t, tg, w)
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(seed, 60))
	m := newExactModel(hook.Codec(s), w)
	seen := map[string]int{}
	defer func() { t.Logf("outcomes: %v", seen) }()
	for i := 0; i < 400; i++ {
		if rng.IntN(4) == 0 {
			at = at.Add(time.Duration(rng.Int64N(int64(2 * w.Bucket))))
		} else {
			at = at.Add(time.Duration(rng.Int64N(int64(w.Bucket / 4))))
		}
		step := fmt.Sprintf("step %d at %v", i, at.Format(time.RFC3339Nano))
		if rng.IntN(3) == 0 {
			delta := rng.Int64N(4)
			switch rng.IntN(12) {
			case 0:
				delta = -rng.Int64N(3) - 1
			case 1:
				delta = 1<<52 - rng.Int64N(3)
			case 2:
				delta = -(1 << 52) + rng.Int64N(3)
			}
			want, ok := m.add(at, delta)
			got, err := s.At(at).Add(ctx, "x", delta)
			require.True(t, ok, step)
			require.NoError(t, err, "%s: Add %d", step, delta)
			require.Equal(t, want.Int64(), got, "%s: Add %d", step, delta)
			continue
		}
		sum := m.sum(at, w.Length)
		cost := rng.Int64N(4)
		limit := max(0, min(1<<53, sum.Int64()-cost+rng.Int64N(7)-4)) // near the edge, mostly refused
		if rng.IntN(10) == 0 {
			limit = rng.Int64N(3) // far below the sum
		}
		want, ok := m.allow(at, limit, cost)
		require.True(t, ok, step)
		got, err := s.At(at).Allow(ctx, "x", limit, cost)
		require.NoError(t, err, "%s: Allow(%d, %d) on %v", step, limit, cost, sum)
		seen[fmt.Sprintf("allowed %v", want.Allowed)]++
		require.Equal(t, want, got, "%s: Allow(%d, %d) on %v", step, limit, cost, sum)
	}
}

// TestRefusalBigBuckets: a refusal whose oldest buckets are past 2^53 in
// magnitude while the window sum is small: -(2^53+1) and 2^53+3, then forty
// buckets of 1, and 1 in the current bucket (a sum of 43). Doubles round the
// big buckets to -2^53 and 2^53+4, and would let a cost of 1 under a limit of
// 41 in when the second bucket leaves (a sum of 40 or less in doubles, 41 in
// fact), a bucket early; the decision must be the exact model's.
func TestRefusalBigBuckets(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: time.Minute, Bucket: time.Second}
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		m := newExactModel(hook.Codec(s), w)
		t0 := time.Now().Truncate(time.Minute).Add(-3 * time.Minute)
		deltas := []int64{-(1<<53 + 1), 1<<53 + 3}
		for range 40 {
			deltas = append(deltas, 1)
		}
		deltas = append(deltas, make([]int64, 17)...) // t0+42s to t0+58s: nothing
		deltas = append(deltas, 1)                    // the current bucket at t0+59.5s
		for i, d := range deltas {
			if d == 0 {
				continue
			}
			at := t0.Add(time.Duration(i) * time.Second)
			_, ok := m.add(at, d)
			require.True(t, ok)
			_, err := s.At(at).Add(ctx, "x", d)
			require.NoError(t, err)
		}
		// At 59.5 s the big buckets are the window's oldest: the retry is
		// settled by them and the next two.
		at := t0.Add(59500 * time.Millisecond)
		want, ok := m.allow(at, 41, 1)
		require.True(t, ok)
		require.False(t, want.Allowed)
		require.Equal(t, 2500*time.Millisecond, want.RetryAfter) // when the first bucket of 1 leaves
		got, err := s.At(at).Allow(ctx, "x", 41, 1)
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}

// TestRefusalAheadBucket: a refusal's reset counts a bucket written by a
// client whose clock is ahead (within the future tolerance): it is the newest
// bucket, and leaves last. Buckets of 1 from t0+3s to t0+59s (a client 3 s
// ahead swept t0 to t0+2s), 5 at t0+62s; at t0+59.5s a cost of 1 under a
// limit of 62 fits once the bucket at t0+3s leaves, and the window is empty
// once the bucket ahead leaves.
func TestRefusalAheadBucket(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: time.Minute, Bucket: time.Second}
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Minute).Add(-3 * time.Minute)
		for i := range 59 {
			_, err := s.At(t0.Add(time.Duration(i)*time.Second)).Add(ctx, "x", 1)
			require.NoError(t, err)
		}
		_, err := s.At(t0.Add(62200*time.Millisecond)).Add(ctx, "x", 5) // a client 3 s ahead
		require.NoError(t, err)
		_, err = s.At(t0.Add(59300*time.Millisecond)).Add(ctx, "x", 1)
		require.NoError(t, err)
		d, err := s.At(t0.Add(59500*time.Millisecond)).Allow(ctx, "x", 62, 1)
		require.NoError(t, err)
		require.Equal(t, store.Decision{Limit: 62, Sum: 62, RetryAfter: 3500 * time.Millisecond,
			ResetAfter: 62500 * time.Millisecond}, d)
	})
}

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
