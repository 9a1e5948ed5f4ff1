package tests

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/figures"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// distinctModel is an exact model of a distinct count: the members of every
// bucket, by bucket start, and the count at an instant over a span.
type distinctModel struct {
	b       time.Duration
	buckets map[time.Time]map[string]bool
	bounds  func(time.Time) time.Time
}

func (m *distinctModel) add(at time.Time, members []string) {
	s := m.bounds(at)
	if m.buckets[s] == nil {
		m.buckets[s] = map[string]bool{}
	}
	for _, x := range members {
		m.buckets[s][x] = true
	}
}

// count is the number of members in the buckets that start in
// (at - span, at + future] and after gone (a bucket a later instant may
// have deleted: nothing starts after the zero time).
func (m *distinctModel) count(at time.Time, span, future time.Duration, gone time.Time) int {
	u := map[string]bool{}
	for s, ms := range m.buckets {
		if s.After(at.Add(-span)) && !s.After(at.Add(future)) && s.After(gone) {
			for x := range ms {
				u[x] = true
			}
		}
	}
	return len(u)
}

// TestDistinctModel drives distinct counts against an exact model on every
// backend: a random stream across a year end of adds at instants that
// wander up to the future tolerance behind the latest one (clients whose
// clocks disagree), late events (Batch.Time) up to beyond the window, and
// counts over the window and a shorter span. The members are few, where
// Redis's HyperLogLog counts exactly, so every answer must equal the model's.
// It walks every path of the ring (a new bucket takes a key, the union is
// rebuilt when the oldest live bucket changes, a late bucket takes a key, a
// count at an instant the union was not built for merges the ring).
func TestDistinctModel(t *testing.T) {
	w := store.Window{Length: time.Minute, Bucket: 10 * time.Second}
	const future = 5 * time.Second // the default future tolerance
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		code := mustCodec(t, w.Bucket)
		m := &distinctModel{b: w.Bucket, buckets: map[time.Time]map[string]bool{},
			bounds: func(at time.Time) time.Time { _, st, _ := code.Bounds(at); return st }}
		rng := rand.New(rand.NewPCG(23, uint64(len(tg.name))))
		base := utc("2026-01-01T00:00:00Z").Add(-100 * time.Second)
		latest := base
		checked := 0
		for step := 0; step < 160; step++ {
			base = base.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			at := base.Add(-time.Duration(rng.IntN(int(future/time.Millisecond))) * time.Millisecond)
			if at.After(latest) {
				latest = at
			}
			// A bucket that the latest writer saw leave the window may be gone.
			gone := m.bounds(latest.Add(-w.Length))
			ms := []string{"c" + strconv.Itoa(rng.IntN(25))}
			if rng.IntN(3) == 0 {
				ms = append(ms, "c"+strconv.Itoa(rng.IntN(25)))
			}
			switch rng.IntN(4) {
			case 0: // a late event, perhaps too late
				e := at.Add(-time.Duration(rng.IntN(75000)) * time.Millisecond)
				res, err := store.Apply(ctx, store.Batch{Time: e, Ops: []store.Op{{Store: s.At(at), Key: "dev", Kind: store.OpDistinct, Members: ms}}})
				if !m.bounds(e).After(at.Add(-w.Length)) {
					require.ErrorIs(t, err, store.ErrTooOld, "step %d: an event at %v, at %v", step, e, at)
					continue
				}
				require.NoError(t, err, "step %d", step)
				require.True(t, res[0].Values[0].Counted, "step %d", step)
				m.add(e, ms)
				want, alt := m.count(at, w.Length, future, gone), m.count(at, w.Length, future, time.Time{})
				if want == alt {
					require.EqualValues(t, want, res[0].Values[0].Sum, "step %d: late add at %v (event %v)", step, at, e)
					checked++
				}
			default:
				n, err := addDistinct(ctx, s.At(at), "dev", ms...)
				require.NoError(t, err, "step %d", step)
				m.add(at, ms)
				want, alt := m.count(at, w.Length, future, gone), m.count(at, w.Length, future, time.Time{})
				if want == alt {
					require.EqualValues(t, want, n, "step %d: add at %v", step, at)
					checked++
				}
			}
			if step%5 == 0 {
				// Counts at the latest instant: nothing live there was deleted.
				n, err := countDistinct(ctx, s.At(latest), "dev")
				require.NoError(t, err)
				require.EqualValues(t, m.count(latest, w.Length, future, time.Time{}), n, "step %d: count at %v", step, latest)
				n, err = countDistinct(ctx, s.At(latest).Over(20*time.Second), "dev")
				require.NoError(t, err)
				require.EqualValues(t, m.count(latest, 20*time.Second, future, time.Time{}), n, "step %d: count over 20s at %v", step, latest)
				checked += 2
			}
		}
		require.Greater(t, checked, 150, "too few answers were comparable with the model")
	})
}

// TestDistinctRace: 40 callers add their own member at once, at instants
// spread over three buckets (so that several of them give a bucket its ring
// key or rebuild the union), on every backend. Every member is counted
// once: the count at the end is 40, and each caller's answer is between 1
// and 40.
func TestDistinctRace(t *testing.T) {
	w := store.Window{Length: time.Minute, Bucket: 10 * time.Second}
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		t0 := time.Now().Truncate(w.Bucket).Add(-25 * time.Second)
		const callers = 40
		var wg sync.WaitGroup
		got := make([]int64, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				at := t0.Add(time.Duration(i) * 600 * time.Millisecond) // 0 .. 23.4 s: three buckets
				got[i], errs[i] = addDistinct(ctx, s.At(at), "dev", "m"+strconv.Itoa(i))
			}()
		}
		close(start)
		wg.Wait()
		for i := range callers {
			require.NoError(t, errs[i])
			require.GreaterOrEqual(t, got[i], int64(1), "caller %d", i)
			require.LessOrEqual(t, got[i], int64(callers), "caller %d", i)
		}
		n, err := countDistinct(ctx, s.At(t0.Add(24*time.Second)), "dev")
		require.NoError(t, err)
		require.EqualValues(t, callers, n)
		// And once more after a write there, which builds the union.
		n, err = addDistinct(ctx, s.At(t0.Add(24*time.Second)), "dev", "m0")
		require.NoError(t, err)
		require.EqualValues(t, callers, n)
	})
}

// TestDistinctManyMembers: one RecordStat of StatDistinct of 20,000 members, on one window
// (its own operation) and on a tiered store (a group's distinct item),
// counts them all: Lua's unpack fails at some 8,000 values ("too many
// results to unpack"), so the scripts take members in slices.
func TestDistinctManyMembers(t *testing.T) {
	w := store.Window{Length: time.Minute, Bucket: 10 * time.Second}
	forEach(t, func(t *testing.T, tg target) {
		one, _ := newStore(t, tg, w)
		tiered, _ := newStore(t, tg, w, store.WithTiers(store.Window{Length: time.Hour, Bucket: time.Minute}))
		ctx := ctxT(t)
		const n = 20000
		m := make([]string, n)
		for i := range m {
			m[i] = "card-" + strconv.Itoa(i)
		}
		for name, s := range map[string]*store.Store{"one window": one, "tiered": tiered} {
			got, err := addDistinct(ctx, s, "many", m...)
			require.NoError(t, err, name)
			// HyperLogLog's standard error is 0.81%: 2.5% is three of them.
			require.InEpsilon(t, n, got, 0.025, name)
			again, err := addDistinct(ctx, s, "many", m[:10]...)
			require.NoError(t, err, name)
			require.Equal(t, got, again, "%s: members seen before change nothing", name)
		}
	})
}

// TestDistinctRingCap: a distinct count whose ring is at the cap (7,900
// keys) counts with every bucket live (PFCOUNT of 7,897 keys, which Lua's
// unpack must pass), and adds; one bucket more is refused with ErrInvalid
// by every distinct call, before anything is sent. Redis 7.0 only. The ring
// is written directly (one member per bucket, and the hash of which key
// each bucket holds, as distinct.lua keeps them): 7,897 RecordStat of StatDistinct calls,
// each reading the growing hash whole, took a minute.
func TestDistinctRingCap(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	const n = 7897 // buckets: a ring of n + 3 keys with no future tolerance
	mk := func(buckets int) *store.Store {
		s, err := store.New(ctx, c, store.Window{Length: time.Duration(buckets) * time.Second, Bucket: time.Second},
			store.WithPrefix(harness.Prefix(t)+strconv.Itoa(buckets)+":"), store.WithFutureTolerance(0))
		require.NoError(t, err)
		return s
	}
	s := mk(n)
	rk, err := hook.RedisKey(s, "wide")
	require.NoError(t, err)
	t0 := time.Now().Truncate(time.Second).Add(-n * time.Second)
	cmds := make(rueidis.Commands, 0, n+1)
	held := make([]string, 0, 2*n+2)
	for i := range n {
		cmds = append(cmds, c.B().Pfadd().Key(rk+":d:r"+strconv.Itoa(i)).Element("m"+strconv.Itoa(i)).Build())
		held = append(held, strconv.FormatInt(t0.Add(time.Duration(i)*time.Second).UnixMilli(), 10), strconv.Itoa(i))
	}
	held = append(held, "h", strconv.FormatInt(t0.Add((n-1)*time.Second).UnixMilli(), 10))
	hset := c.B().Hset().Key(rk + ":d").FieldValue()
	for i := 0; i < len(held); i += 2 {
		hset = hset.FieldValue(held[i], held[i+1])
	}
	cmds = append(cmds, hset.Build())
	for _, r := range c.DoMulti(ctx, cmds...) {
		require.NoError(t, r.Error())
	}
	last := s.At(t0.Add((n - 1) * time.Second).Add(500 * time.Millisecond))
	// A count over a span shorter than the window merges the live ring keys,
	// and so does a count over the window until an add rebuilds the union.
	got, err := countDistinct(ctx, last.Over(time.Duration(n-1)*time.Second), "wide")
	require.NoError(t, err)
	require.InEpsilon(t, n-1, got, 0.025)
	got, err = countDistinct(ctx, last, "wide")
	require.NoError(t, err)
	require.InEpsilon(t, n, got, 0.025)
	for range 2 { // the second add rebuilds the union from the whole ring
		again, err := addDistinct(ctx, last, "wide", "m0")
		require.NoError(t, err)
		require.Equal(t, got, again)
	}

	over := mk(n + 1)
	_, err = addDistinct(ctx, over, "wide", "m")
	require.ErrorIs(t, err, store.ErrInvalid)
	require.ErrorContains(t, err, "7901 keys, at most 7900")
	_, err = countDistinct(ctx, over, "wide")
	require.ErrorIs(t, err, store.ErrInvalid)
	_, err = store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: over, Key: "wide", Kind: store.OpDistinct, Members: []string{"m"}}}})
	require.ErrorIs(t, err, store.ErrInvalid)
}

// TestDistinctTolerances: two stores of one window whose future tolerances
// differ, and so their rings of keys (distinct.lua's ws_dk: 13 keys and 18),
// count side by side on one server, on every backend: the wider one holds
// the window's 10 buckets and 5 ahead (written first, by clients whose
// clocks are ahead), each counted.
func TestDistinctTolerances(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		narrow, _ := newStore(t, tg, w, store.WithFutureTolerance(0))
		wide, _ := newStore(t, tg, w, store.WithFutureTolerance(5*time.Second))
		t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
		for _, c := range []struct {
			s     *store.Store
			key   string
			ahead int
		}{{narrow, "n", 0}, {wide, "w", 5}, {narrow, "n2", 0}} {
			now := t0.Add(9500 * time.Millisecond)
			for j := 1; j <= c.ahead; j++ {
				_, err := addDistinct(ctx, c.s.At(now.Add(time.Duration(j)*time.Second)), c.key, "a"+strconv.Itoa(j))
				require.NoError(t, err)
			}
			for i := range 10 {
				_, err := addDistinct(ctx, c.s.At(t0.Add(time.Duration(i)*time.Second+500*time.Millisecond)), c.key, "m"+strconv.Itoa(i))
				require.NoError(t, err)
			}
			got, err := countDistinct(ctx, c.s.At(now), c.key)
			require.NoError(t, err)
			require.EqualValues(t, 10+c.ahead, got, "%s: every bucket, and those ahead", c.key)
		}
	})
}

// TestRecordStatDistinctTimeAndID: RecordStat of StatDistinct honours the
// event's Time (a late member counts in its own bucket and leaves the window
// with it; one too old fails with ErrTooOld and writes nothing) and its ID
// (a replay answers the count and writes nothing), on every backend.
func TestRecordStatDistinctTimeAndID(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		s, srv := newStore(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second})
		c, prefix := srv.Client(t), harness.Prefix(t)
		t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
		now := s.At(t0)
		ev := func(id string, at time.Time, m string) store.StatEvent {
			return store.StatEvent{Key: "dev", Stat: store.StatDistinct, Members: []string{m}, ID: id, Time: at}
		}
		v, err := now.RecordStat(ctx, ev("", t0.Add(-5*time.Second), "late"))
		require.NoError(t, err)
		require.Equal(t, store.StatValue{OK: true, Value: 1}, v)
		v, err = now.RecordStat(ctx, ev("e1", time.Time{}, "now"))
		require.NoError(t, err)
		require.EqualValues(t, 2, v.Value)
		before := dump(t, c, scanKeys(t, c, prefix)...)
		_, err = now.RecordStat(ctx, ev("", t0.Add(-time.Minute), "old"))
		require.ErrorIs(t, err, store.ErrTooOld)
		v, err = now.RecordStat(ctx, ev("e1", time.Time{}, "other"))
		require.NoError(t, err, "a replay answers")
		require.EqualValues(t, 2, v.Value, "a replay adds nothing")
		require.Equal(t, before, dump(t, c, scanKeys(t, c, prefix)...), "a failure and a replay write nothing")
		// In a batch a distinct count is an OpDistinct op: StatDistinct in an
		// OpStat or OpRead fails before anything is sent.
		for _, k := range []store.OpKind{store.OpStat, store.OpRead} {
			_, err = store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: now, Key: "dev", Kind: k, Stat: store.StatDistinct}}})
			require.ErrorIs(t, err, store.ErrInvalid)
			require.ErrorContains(t, err, "OpDistinct")
		}
		// The late member's bucket leaves 5 s before the other's.
		v, err = s.At(t0.Add(5500*time.Millisecond)).ReadStat(ctx, "dev", store.StatDistinct)
		require.NoError(t, err)
		require.EqualValues(t, 1, v.Value, "the late member left the window with its bucket")
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

// TestDistinctKeysExpire: the keys of a distinct count, of every tier (the
// hash of which bucket each ring key holds, the union once built, and the
// current bucket's ring key), carry a TTL that ends exactly when the newest bucket
// leaves that tier's window (checked against PTTL, within the test's own
// elapsed time: the expiry is set by the add that gave the bucket its key,
// which turns the client clock's instant into the server's); the ring never holds more keys than its size; and once the
// longest window has passed, no key is left.
func TestDistinctKeysExpire(t *testing.T) {
	short := store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}
	long := store.Window{Length: 3 * time.Second, Bucket: time.Second}
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, short, store.WithTiers(long))
		c := srv.Client(t)
		ctx := ctxT(t)
		prefix := prefixOf(t, s)
		var longest int64 // the longest add so far, ms: the keys' expiry may come from any earlier add
		unions := 0       // checks of a union's expiry
		for i := 0; i < 12; i++ {
			at := time.Now()
			t0 := time.Now()
			_, err := addDistinct(ctx, s.At(at), "dev", "m"+strconv.Itoa(i))
			require.NoError(t, err)
			longest = max(longest, time.Since(t0).Milliseconds())
			for ti, w := range []store.Window{short, long} {
				rk, err := hook.RedisKey(s.Over(w.Length), "dev")
				require.NoError(t, err)
				_, start, _ := mustCodec(t, w.Bucket).Bounds(at)
				idx, err := c.Do(ctx, c.B().Hget().Key(rk+":d").Field(strconv.FormatInt(start.UnixMilli(), 10)).Build()).ToString()
				require.NoError(t, err, "tier %d: the current bucket has no ring key", ti)
				want := start.Add(w.Length).UnixMilli() - at.UnixMilli() // when the newest bucket leaves the window (the scripts see whole ms)
				for _, key := range []string{rk + ":d", rk + ":d:u", rk + ":d:r" + idx} {
					pttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
					require.NoError(t, err)
					slack := time.Since(t0).Milliseconds() + longest + 3 // after the PTTL; whole ms, on both clocks
					if pttl == -2 && key == rk+":d:u" {
						continue // the union is built by the second add after the oldest bucket changed
					}
					if key == rk+":d:u" {
						unions++
					}
					// (within slack either way: the script turns the client clock's
					// instant into the server's at the moment it runs)
					require.LessOrEqual(t, pttl, want+slack, "tier %d key %s: TTL past the newest bucket's life", ti, key)
					require.Greater(t, pttl, want-slack, "tier %d key %s: TTL %d ms, the newest bucket lives %d ms more", ti, key, pttl, want)
				}
				ring := 0
				for _, k := range scanKeys(t, c, prefix) {
					if strings.HasPrefix(k, rk+":d:r") {
						ring++
					}
				}
				n := int((w.Length + w.Bucket - 1) / w.Bucket)
				size := n + 3 + min(int((5*time.Second+w.Bucket-1)/w.Bucket), n) // the default future tolerance, 5 s
				require.LessOrEqual(t, ring, size, "tier %d: more ring keys than the ring's size", ti)
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.Greater(t, unions, 6, "too few unions were built to check their expiry")
		time.Sleep(long.Length + long.Bucket)
		for _, k := range scanKeys(t, c, prefix) {
			require.NotContains(t, k, ":d", "a key of the distinct count is left once the window has passed")
		}
	})
}

// TestDistinctError measures distinct counts at 100, 10,000 and 1,000,000
// members spread over the 10 buckets of one counter: the relative error of
// the count, and the memory of the distinct count's keys (its buckets'
// HyperLogLogs, their union and the hash of the ring) against one exact set
// of the same members (MEMORY USAGE). The members are fixed, and Redis's
// HyperLogLog is deterministic, so the figures are exact.
func TestDistinctError(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxLong(t)
	server := srv.Version(t)
	// Minute buckets: the keys expire on the server's clock a window after
	// their writes, and the million adds may take longer than a
	// 10-second window on a loaded machine (it failed so under CI's load).
	w := store.Window{Length: 10 * time.Minute, Bucket: time.Minute}
	now := time.Now().Truncate(time.Minute).Add(9*time.Minute + 30*time.Second)
	for _, n := range []int{100, 10000, 1000000} {
		s, err := store.New(ctx, c, w, store.WithPrefix(fmt.Sprintf("d%d:", n)))
		require.NoError(t, err)
		batch := min(1000, n/10)
		var jobs [][2]int // bucket, first member: the members spread over the 10 buckets
		for first := 0; first < n; first += batch {
			jobs = append(jobs, [2]int{first / batch % 10, first})
		}
		parallelKeys(t, len(jobs), func(j int) error {
			b, first := jobs[j][0], jobs[j][1]
			members := make([]string, 0, batch)
			for i := first; i < first+batch && i < n; i++ {
				members = append(members, "member-"+strconv.Itoa(i))
			}
			_, err := addDistinct(ctx, s.At(now.Add(-time.Duration(b)*time.Minute)), "k", members...)
			return err
		})
		got, err := countDistinct(ctx, s.At(now), "k")
		require.NoError(t, err)
		rel := math.Abs(float64(got)-float64(n)) / float64(n) * 100
		t.Logf("%d distinct: counted %d, error %.3f%%", n, got, rel)
		require.Less(t, rel, 3.0, "beyond 3 standard errors")
		figures.Check(t, fmt.Sprintf("distinct/error/%d", n), figures.Figure{Value: math.Round(rel*100) / 100, Unit: "%", Server: server}, 0)
		// Memory: the distinct count's keys (the ring of its buckets'
		// HyperLogLogs, the hash of which bucket each holds, and the union),
		// brought to now by one more add of a member the current bucket has,
		// against one SET of the members.
		_, err = addDistinct(ctx, s.At(now), "k", "member-0")
		require.NoError(t, err)
		rk, err := hook.RedisKey(s, "k")
		require.NoError(t, err)
		var hll int64
		ring, err := c.Do(ctx, c.B().Keys().Pattern(rk+":d:r*").Build()).AsStrSlice()
		require.NoError(t, err)
		keys := append([]string{rk + ":d", rk + ":d:u"}, ring...)
		for _, k := range keys {
			m, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(k).Args("SAMPLES", "0").Build()).AsInt64()
			require.NoError(t, err, k)
			hll += m
		}
		set := fmt.Sprintf("exactset%d", n)
		for first := 0; first < n; first += 1000 {
			cmd := c.B().Sadd().Key(set).Member("member-" + strconv.Itoa(first))
			for i := first + 1; i < first+1000 && i < n; i++ {
				cmd = cmd.Member("member-" + strconv.Itoa(i))
			}
			require.NoError(t, c.Do(ctx, cmd.Build()).Error())
		}
		// A set's hash table grows by incremental rehashing, one step per
		// lookup: the SADD of the last members may leave it half done, both
		// tables allocated (512 B more at 100 members). One lookup per member
		// finishes it, so that the figure is the set's settled size.
		for first := 0; first < n; first += 1000 {
			cmd := c.B().Smismember().Key(set).Member("member-" + strconv.Itoa(first))
			for i := first + 1; i < first+1000 && i < n; i++ {
				cmd = cmd.Member("member-" + strconv.Itoa(i))
			}
			require.NoError(t, c.Do(ctx, cmd.Build()).Error())
		}
		sm, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(set).Args("SAMPLES", "0").Build()).AsInt64()
		require.NoError(t, err)
		t.Logf("%d distinct: HyperLogLog buckets %d B, exact set %d B", n, hll, sm)
		figures.Check(t, fmt.Sprintf("distinct/hll/%d", n), figures.Figure{Value: float64(hll), Unit: "B", Server: server}, 0.02)
		figures.Check(t, fmt.Sprintf("distinct/set/%d", n), figures.Figure{Value: float64(sm), Unit: "B", Server: server}, 0.02)
	}
}
