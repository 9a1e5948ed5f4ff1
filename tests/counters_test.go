package tests

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestShapesNeverMeet: two stores of different windows under one prefix keep
// different counters for one key (the shape is part of the Redis key), on
// every backend: neither corrupts the other.
func TestShapesNeverMeet(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		a, srv := newStore(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second})
		b, err := store.New(ctxT(t), srv.Client(t), store.Window{Length: time.Minute, Bucket: 5 * time.Second},
			store.WithPrefix(prefixOf(t, a)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		ctx := ctxT(t)
		now := time.Now()
		for i := 0; i < 20; i++ {
			_, err := a.At(now.Add(time.Duration(i)*300*time.Millisecond)).Add(ctx, "k", 2)
			require.NoError(t, err)
			_, err = b.At(now.Add(time.Duration(i)*300*time.Millisecond)).Add(ctx, "k", 3)
			require.NoError(t, err)
		}
		at := now.Add(6 * time.Second)
		na, err := a.At(at).Sum(ctx, "k")
		require.NoError(t, err)
		nb, err := b.At(at).Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 40, na)
		require.EqualValues(t, 60, nb)
		ka, _ := hook.RedisKey(a, "k")
		kb, _ := hook.RedisKey(b, "k")
		require.NotEqual(t, ka, kb)
	})
}

// TestNegativeSums pins Allow's semantics on a negative sum (credits): a cost
// fits when cost <= limit and sum + cost <= limit; no cost above the limit
// ever fits; Remaining stays within [0, limit].
func TestNegativeSums(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		now := time.Now()
		_, err := s.At(now).Add(ctx, "credit", -5)
		require.NoError(t, err)
		r, err := s.At(now).Allow(ctx, "credit", 3, 0)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.EqualValues(t, -5, r.Sum)
		require.EqualValues(t, 3, r.Remaining, "remaining never exceeds the limit")
		r, err = s.At(now).Allow(ctx, "credit", 3, 4)
		require.NoError(t, err)
		require.False(t, r.Allowed, "a cost above the limit never fits, credits or not")
		require.Equal(t, time.Duration(-1), r.RetryAfter)
		r, err = s.At(now).Allow(ctx, "credit", 3, 3)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.EqualValues(t, -2, r.Sum)
		require.EqualValues(t, 3, r.Remaining)
		r, err = s.At(now).Allow(ctx, "credit", 3, 3)
		require.NoError(t, err)
		require.True(t, r.Allowed, "-2 + 3 <= 3")
		require.EqualValues(t, 1, r.Sum)
		require.EqualValues(t, 2, r.Remaining)
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

// TestHeadExpiryCoversEveryWindow: on the plain hash, the head the windows
// of one key share lives as long as its longest-lived record: a write to
// the short window alone (a fresh start, then a move) after one to the long
// window leaves the long window's count, whose current bucket only the head
// holds, once the short window has emptied.
func TestHeadExpiryCoversEveryWindow(t *testing.T) {
	for _, tg := range plainTargets() {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			srv := harness.Shared(t, tg.kind)
			opts := []store.Option{store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend)}
			c := srv.Client(t)
			short, err := store.New(ctxT(t), c, store.Window{Length: time.Second, Bucket: 100 * time.Millisecond}, opts...)
			require.NoError(t, err)
			long, err := store.New(ctxT(t), c, store.Window{Length: 20 * time.Second, Bucket: 10 * time.Second}, opts...)
			require.NoError(t, err)
			ctx := ctxT(t)
			_, err = long.Add(ctx, "k", 7)
			require.NoError(t, err)
			longAt := time.Now() // the long count lives at least 10 s past this
			for range 3 {
				_, err = short.Add(ctx, "k", 1)
				require.NoError(t, err)
				time.Sleep(150 * time.Millisecond)
			}
			shortAt := time.Now()
			time.Sleep(2*time.Second - time.Since(shortAt)) // the short window's buckets, and its expiry, are past
			n, err := long.Sum(ctx, "k")
			require.NoError(t, err)
			if time.Since(longAt) < 10*time.Second {
				require.EqualValues(t, 7, n, "the long window lost its count with the short window's expiry")
			}
			n, err = short.Sum(ctx, "k")
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}

// race runs fn(g) for g in [0, n) at once, and waits for them all.
func race(n int, fn func(g int)) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(g)
		}()
	}
	wg.Wait()
}

// TestSumRuns: the reads that share a script call go as runs of equal reads,
// each run followed by the next: 48 callers read 20 keys, with one call in
// flight, so that their Sums over the whole window and over its last 10 s
// share calls, between SumMany and ReadStatMany calls of maxima (each one
// run, or several of its own). Each key's answers are its own (1001+2i, i+1
// and 5000+i), so a read that took another's keys is seen.
func TestSumRuns(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		obs := &callCounter{script: "sum"}
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithBatching(64, 1), store.WithObserver(obs))
		ctx := ctxT(t)
		now := time.Now()
		at := s.At(now)
		keys := make([]string, 20)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
			_, err := s.At(now.Add(-20*time.Second)).Add(ctx, keys[i], int64(1000+i))
			require.NoError(t, err)
			_, err = at.Add(ctx, keys[i], int64(i+1))
			require.NoError(t, err)
			_, err = at.RecordStat(ctx, store.StatEvent{Key: keys[i], Stat: store.StatMax, Value: int64(5000 + i)})
			require.NoError(t, err)
		}
		whole := func(i int) int64 { return int64(1001 + 2*i) }
		last := func(i int) int64 { return int64(i + 1) }
		errs := make(chan error, 48)
		race(48, func(g int) {
			for n := range 6 {
				i := (g*7 + n*3) % len(keys)
				var err error
				switch (g + n) % 4 {
				case 0:
					var got []int64
					if got, err = at.SumMany(ctx, keys[i:min(i+4, len(keys))]); err == nil {
						for j, v := range got {
							if v != whole(i+j) {
								err = fmt.Errorf("SumMany: %s sums %d, want %d", keys[i+j], v, whole(i+j))
							}
						}
					}
				case 1:
					var v int64
					if v, err = at.Sum(ctx, keys[i]); err == nil && v != whole(i) {
						err = fmt.Errorf("Sum: %s sums %d, want %d", keys[i], v, whole(i))
					}
				case 2:
					var v int64
					if v, err = at.Over(10*time.Second).Sum(ctx, keys[i]); err == nil && v != last(i) {
						err = fmt.Errorf("Over(10s).Sum: %s sums %d, want %d", keys[i], v, last(i))
					}
				default:
					var v []store.StatValue
					if v, err = at.ReadStatMany(ctx, keys[i:min(i+3, len(keys))], store.StatMax); err == nil {
						for j, m := range v {
							if m.Value != int64(5000+i+j) {
								err = fmt.Errorf("ReadStatMany: %s's max is %d, want %d", keys[i+j], m.Value, 5000+i+j)
							}
						}
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		require.Greater(t, obs.most.Load(), int64(4), "no script call carried the reads of several callers")
	})
}

// TestWriteRuns: writes that share a script call go as runs of equal
// operations, each atomic and answered on its own: 48 callers add 1 and
// allow 1 under a limit of 1,000 on 16 keys, with one call in flight, so
// that their operations share calls as runs, and a key of another type
// among them fails alone. Every key counts each of its writes once.
func TestWriteRuns(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		obs := &callCounter{script: "write"}
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithBatching(64, 1), store.WithObserver(obs))
		ctx := ctxT(t)
		c := srv.Client(t)
		at := s.At(time.Now())
		require.NoError(t, c.Do(ctx, c.B().Set().Key(counterKey(t, s, "bad")).Value("not a counter").Build()).Error())
		keys := make([]string, 16)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		var wrong atomic.Int64
		race(48, func(g int) {
			for n := range 8 {
				k := keys[(g+n*5)%len(keys)]
				var err error
				switch (g + n) % 3 {
				case 0:
					_, err = at.Add(ctx, k, 1)
				case 1:
					var d store.Decision
					if d, err = at.Allow(ctx, k, 1000, 1); err == nil && !d.Allowed {
						err = fmt.Errorf("%s refused", k)
					}
				default:
					if _, err = at.Add(ctx, "bad", 1); !errors.Is(err, store.ErrWrongType) {
						err = fmt.Errorf("the key of another type: %v, want ErrWrongType", err)
					} else {
						err = nil
					}
				}
				if err != nil {
					t.Error(err)
					wrong.Add(1)
				}
			}
		})
		require.Zero(t, wrong.Load())
		want := make([]int64, len(keys))
		for g := range 48 {
			for n := range 8 {
				if (g+n)%3 != 2 {
					want[(g+n*5)%len(keys)]++
				}
			}
		}
		got, err := at.SumMany(ctx, keys)
		require.NoError(t, err)
		require.Equal(t, want, got, "each write counted once")
		require.Greater(t, obs.most.Load(), int64(4), "no script call carried the writes of several callers")
	})
}

// The plain hash's fast path (nativehash/lua/fast.lua) must answer and write
// what the event pipeline answers and writes.

// plainTargets are the targets whose backend is the plain hash, the one
// with a fast path.
func plainTargets() []target {
	var out []target
	for _, tg := range targets {
		if tg.wantBackend == "nativehash-plain" {
			out = append(out, tg)
		}
	}
	return out
}

// forPlain runs fn on each plain-hash target, in parallel, with a client of
// the target's shared server and the test's context.
func forPlain(t *testing.T, fn func(t *testing.T, c rueidis.Client, ctx context.Context)) {
	for _, tg := range plainTargets() {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			fn(t, harness.Shared(t, tg.kind).Client(t), ctxT(t))
		})
	}
}

// plainStore is a store of window w on the plain hash under prefix p.
func plainStore(t *testing.T, c rueidis.Client, p string, w store.Window, opts ...store.Option) *store.Store {
	t.Helper()
	s, err := store.New(ctxT(t), c, w, append(opts, store.WithPrefix(p), store.WithBackend("nativehash-plain"))...)
	require.NoError(t, err)
	return s
}

// traced makes stores of the three windows of the bench's allow3 (10s/1s,
// 100s/10s, 1000s/100s) under one prefix, whose scripts count the paths they
// take under tag; general makes them take the pipeline alone.
func traced(t *testing.T, c rueidis.Client, prefix, tag string, general bool) []*store.Store {
	t.Helper()
	var out []*store.Store
	for _, sc := range []time.Duration{1, 10, 100} {
		out = append(out, tracedWindow(t, c, prefix, tag, general, store.Window{Length: 10 * sc * time.Second, Bucket: sc * time.Second}))
	}
	return out
}

// tracedWindow is one such store, of window w.
func tracedWindow(t *testing.T, c rueidis.Client, prefix, tag string, general bool, w store.Window) *store.Store {
	t.Helper()
	s, err := store.New(ctxT(t), c, w, store.WithPrefix(prefix), store.WithBackend("nativehash-plain"),
		hook.WithTrace(tag, general).(store.Option))
	require.NoError(t, err)
	return s
}

// tracedSet is a feature set over two entities on the plain hash, whose
// scripts count their paths under tag (general: the pipeline alone): a
// count, a limit of 25 and a last seen per user, a count, a sum and a
// maximum per IP, distinct counts of each other, on the 10s/1s window: an
// event is a link of two groups, each with a distinct add and an extreme.
func tracedSet(t *testing.T, c rueidis.Client, prefix, tag string, general bool) *features.Set {
	t.Helper()
	w := []store.Window{{Length: 10 * time.Second, Bucket: time.Second}}
	fs, err := features.New(ctxT(t), c, []features.Feature{
		{Name: "user_logins", Entity: "user", Kind: features.Count, Windows: w},
		{Name: "lim", Entity: "user", Kind: features.Limit, Windows: w, Limits: []int64{25}},
		{Name: "ips", Entity: "user", Kind: features.Distinct, Of: "ip", Windows: w},
		{Name: "seen", Entity: "user", Kind: features.Last, Windows: w},
		{Name: "top", Entity: "ip", Kind: features.Max, Windows: w},
		{Name: "ip_logins", Entity: "ip", Kind: features.Count, Windows: w},
		{Name: "amount", Entity: "ip", Kind: features.Sum, Windows: w},
		{Name: "users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: w},
	}, store.WithPrefix(prefix+"fx:"), store.WithBackend("nativehash-plain"), hook.WithTrace(tag, general).(store.Option))
	require.NoError(t, err)
	return fs
}

// w12s3s is a window whose record agrees with 10s/1s's on its current and
// oldest buckets whenever a 3 s bucket starts: only the record's window
// tells the two apart.
var w12s3s = store.Window{Length: 12 * time.Second, Bucket: 3 * time.Second}

// TestFastPathDifferential drives the fast path and the pipeline alone (the
// test-only switch: a trace with general on) with the same random
// operations, each on a prefix of its own: Add, Record without a sum, Allow,
// Allow near its limit, AllowAll of a key's windows (in a random order, of
// few lists, so that one recurs under a later clock), across keys and over
// two heads of one slot (windows told apart by their record alone), a batch
// of counts, distinct adds, window statistics (max, min, average, first and
// last seen, recent values), a feature set's events (tracedSet: some
// overflowing a sum, some failing on a key of another type in either
// entity); amounts near the limits of doubles and negative ones, limits that
// admit and refuse, a clock that moves by a bucket, many buckets, past every
// window and across a year's end. Every answer and error must be the same, and
// after every operation every key's bytes (DUMP). The fast path must have
// taken many operations, its refusal many, and the pipeline every one on
// its side.
func TestFastPathDifferential(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		pa, pb := harness.Prefix(t)+"a:", harness.Prefix(t)+"b:"
		tag := strings.ReplaceAll(harness.Prefix(t), ":", "")
		fast := traced(t, c, pa, tag+"f", false)
		slow := traced(t, c, pb, tag+"g", true)
		fast = append(fast, tracedWindow(t, c, pa, tag+"f", false, w12s3s))
		slow = append(slow, tracedWindow(t, c, pb, tag+"g", true, w12s3s))
		fsa, fsb := tracedSet(t, c, pa, tag+"f", false), tracedSet(t, c, pb, tag+"g", true)
		// A user whose head is a list, an IP whose distinct count's hash is:
		// an event with either fails in its link's second group (the user's,
		// after the IP's) or its first, which the error names (its entity).
		at := time.Date(2026, 12, 31, 23, 56, 0, 0, time.UTC)
		for _, p := range []struct {
			set    *features.Set
			prefix string
		}{{fsa.At(at), pa + "fx:"}, {fsb.At(at), pb + "fx:"}} {
			eventEnv{set: p.set, nodes: []rueidis.Client{c}, client: c, prefix: p.prefix}.breakEntity(t, ctx, "user:uw")
			_, err := p.set.Record(ctx, features.Event{Entities: map[string]string{"user": "ux", "ip": "ipw"}, Amount: 1})
			require.NoError(t, err)
			var d string
			for key := range takeSnapshot(t, ctx, []rueidis.Client{c}, p.prefix+"{ip:ipw}:").keys {
				if strings.Contains(key, "users") && strings.HasSuffix(key, ":d") {
					d = key
				}
			}
			require.NotEmpty(t, d, "no distinct count's hash of ip:ipw")
			require.NoError(t, c.Do(ctx, c.B().Del().Key(d).Build()).Error())
			require.NoError(t, c.Do(ctx, c.B().Rpush().Key(d).Element("not a hash").Build()).Error())
		}
		rng := rand.New(rand.NewPCG(21, 4))
		amount := func() int64 {
			switch rng.IntN(12) {
			case 0:
				return -rng.Int64N(50)
			case 1:
				return hugeValue(rng)
			case 2:
				return 0
			}
			return 1 + rng.Int64N(20)
		}
		keys := []string{"k0", "k1", "k2"}
		for step := 0; step < 600; step++ {
			switch r := rng.IntN(20); {
			case r == 0:
				at = at.Add(time.Duration(rng.Int64N(int64(40 * time.Second)))) // past the sweep, or every window
			case r < 4:
				at = at.Add(time.Second) // a bucket
			default:
				at = at.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
			}
			k := keys[rng.IntN(len(keys))]
			var op string
			run := func(ss []*store.Store, fs *features.Set) (string, error) {
				var out any
				var err error
				switch op {
				case "add":
					out, err = ss[0].At(at).Add(ctx, k, amount())
				case "nosum":
					out, err = ss[1].At(at).Record(ctx, store.Event{Key: k, Delta: amount(), NoSum: true})
				case "allow":
					out, err = ss[0].At(at).Allow(ctx, k, rng.Int64N(60), rng.Int64N(4))
				case "refuse":
					out, err = ss[rng.IntN(2)].At(at).Allow(ctx, k, rng.Int64N(10), 1+rng.Int64N(3))
				case "allow3":
					// Few lists of limits, so that one recurs under a later
					// clock (the scripts remember a list's windows).
					perm, lims := rng.Perm(3), [][]int64{{40, 90, 150}, {12, 30, 60}}[rng.IntN(2)]
					var ps []store.Quota
					for _, i := range perm {
						ps = append(ps, store.Quota{Store: ss[i], Key: k, Limit: lims[i]})
					}
					out, err = allowAllAt(ctx, at, rng.Int64N(3), ps...)
				case "across":
					out, err = allowAllAt(ctx, at, 1+rng.Int64N(2), store.Quota{Store: ss[0], Key: k, Limit: 5 + rng.Int64N(60)},
						store.Quota{Store: ss[1], Key: k, Limit: 5 + rng.Int64N(60)},
						store.Quota{Store: ss[0], Key: "ip:" + k, Limit: 5 + rng.Int64N(60)})
				case "entity":
					// One slot, two heads (an entity's keys), 10s/1s and
					// 12s/3s in a random order: one group.
					e := "e" + k
					ps := []store.Quota{{Store: ss[0].Entity(e), Key: "a", Limit: 5 + rng.Int64N(60)},
						{Store: ss[3].Entity(e), Key: "a", Limit: 5 + rng.Int64N(60)},
						{Store: ss[3].Entity(e), Key: "b", Limit: 5 + rng.Int64N(60)}}
					rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
					out, err = allowAllAt(ctx, at, 1+rng.Int64N(2), ps...)
				case "batch":
					var res []store.BatchResult
					res, err = applyAt(ctx, at, store.Batch{Ops: []store.Op{{Store: ss[0], Key: k, Delta: amount()},
						{Store: ss[2], Key: k, Delta: amount()}}})
					out = res
				case "distinct":
					var ms []string
					for n := 1 + rng.IntN(3); n > 0; n-- {
						ms = append(ms, "m"+strconv.Itoa(rng.IntN(12)))
					}
					out, err = ss[rng.IntN(2)].At(at).RecordStat(ctx, store.StatEvent{Key: k, Stat: store.StatDistinct, Members: ms})
				case "observe":
					st := []store.Stat{store.StatMax, store.StatMin, store.StatAvg, store.StatFirst, store.StatLast, store.StatRecent}[rng.IntN(6)]
					out, err = ss[rng.IntN(2)].At(at).RecordStat(ctx, store.StatEvent{Key: k, Stat: st, Value: amount()})
				case "features":
					a := amount()
					if rng.IntN(6) == 0 {
						a = math.MaxInt64 - rng.Int64N(3) // (the second overflows the IP's sum)
					}
					user, ip := k, "ip"+strconv.Itoa(rng.IntN(3))
					switch rng.IntN(10) {
					case 0:
						user = "uw"
					case 1:
						ip = "ipw"
					}
					var r features.Result
					r, err = fs.At(at).Record(ctx, features.Event{Entities: map[string]string{"user": user, "ip": ip}, Amount: a})
					b, _ := json.Marshal(r) // (a limit's Decision is a pointer)
					out = string(b)
				}
				return fmt.Sprintf("%+v", out), err
			}
			op = []string{"add", "nosum", "allow", "refuse", "allow3", "across", "entity", "batch", "distinct", "observe", "features"}[rng.IntN(11)]
			state, main := rng.Uint64(), rng
			rng = rand.New(rand.NewPCG(state, 4))
			ra, ea := run(fast, fsa)
			rng = rand.New(rand.NewPCG(state, 4)) // the same draws for the pipeline's side
			rb, eb := run(slow, fsb)
			rng = main
			require.Equal(t, errText(eb, pb), errText(ea, pa), "step %d %s at %v: errors", step, op, at)
			require.Equal(t, rb, ra, "step %d %s at %v: answers", step, op, at)
			sa := takeSnapshot(t, ctx, []rueidis.Client{c}, pa)
			sb := takeSnapshot(t, ctx, []rueidis.Client{c}, pb)
			// A key either side's copy of which expires within 2 s is left
			// out: the two copies, written ms apart, expire ms apart.
			soon := serverMs(t, ctx, c) + 2000
			gone := func(v string, ok bool) bool { return !ok || (expiryOf(v) >= 0 && expiryOf(v) < soon) }
			for key, v := range sa.keys {
				w, ok := sb.keys[pb+strings.TrimPrefix(key, pa)]
				if gone(v, true) && gone(w, ok) {
					continue
				}
				require.True(t, ok, "step %d %s: %s only on the fast side", step, op, key)
				require.Equal(t, dumpOnly(w), dumpOnly(v), "step %d %s at %v: %s differs", step, op, at, key)
				require.InDelta(t, expiryOf(w), expiryOf(v), 2000, "step %d %s: %s's expiry", step, op, key)
			}
			for key, w := range sb.keys {
				_, ok := sa.keys[pa+strings.TrimPrefix(key, pb)]
				require.True(t, ok || gone(w, true), "step %d %s: %s only on the pipeline's side", step, op, key)
			}
		}
		pf, err := hook.Paths(ctx, fast[0], tag+"f")
		require.NoError(t, err)
		pg, err := hook.Paths(ctx, slow[0], tag+"g")
		require.NoError(t, err)
		t.Logf("paths: fast side %v, pipeline side %v", pf, pg)
		require.Greater(t, pf["fast"], int64(150), "the fast path took too few operations to compare: %v", pf)
		require.Greater(t, pf["event"], int64(150), "too few operations left the fast path: %v", pf)
		require.Greater(t, pf["refuse"], int64(30), "the fast path refused too few operations to compare: %v", pf)
		require.Zero(t, pg["fast"], "the switch did not keep the fast path off: %v", pg)
		require.Positive(t, pg["event"], "%v", pg)
	})
}

// errText is an error's text without the prefix it names.
func errText(err error, prefix string) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), prefix, "")
}

func dumpOnly(v string) string { return v[:strings.LastIndex(v, "|")] }

// serverMs is the server's clock, Unix ms.
func serverMs(t *testing.T, ctx context.Context, c rueidis.Client) float64 {
	t.Helper()
	tm, err := c.Do(ctx, c.B().Time().Build()).AsIntSlice()
	require.NoError(t, err)
	return float64(tm[0]*1000 + tm[1]/1000)
}

func expiryOf(v string) float64 {
	n, _ := strconv.ParseFloat(v[strings.LastIndex(v, "|")+1:], 64)
	return n
}

// TestFastPathTaken: the operations the fast path is for take it, one script
// path each, on the plain hash (a trace counts the paths): Add, Record
// without a sum, Allow that admits, AllowAll of a key's windows and across
// keys, a distinct add, a window maximum, a feature set's event; Allow's
// refusal takes the fast path's refusal ("refuse"), on a counter synced on
// the current bucket and after a bucket started; an AllowAll's refusal, an
// event id and a late event take the pipeline.
func TestFastPathTaken(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		tag := strings.ReplaceAll(harness.Prefix(t), ":", "")
		ss := traced(t, c, harness.Prefix(t), tag, false)
		fs := tracedSet(t, c, harness.Prefix(t), tag, false)
		at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
		want := func(fast, refuse, event int64, what string, f func() error) {
			t.Helper()
			require.NoError(t, f(), what)
			p, err := hook.Paths(ctx, ss[0], tag)
			require.NoError(t, err)
			require.Equal(t, map[string]int64{"fast": fast, "refuse": refuse, "event": event}, withZeros(p), what)
		}
		want(1, 0, 0, "add", func() error { _, err := ss[0].At(at).Add(ctx, "k", 1); return err })
		want(1, 0, 0, "add again", func() error { _, err := ss[0].At(at).Add(ctx, "k", 1); return err })
		want(1, 0, 0, "record without a sum", func() error {
			_, err := ss[0].At(at).Record(ctx, store.Event{Key: "k", Delta: 2, NoSum: true})
			return err
		})
		want(1, 0, 0, "allow", func() error { _, err := ss[0].At(at).Allow(ctx, "k", 100, 1); return err })
		want(0, 1, 0, "a refusal", func() error { _, err := ss[0].At(at).Allow(ctx, "k", 3, 1); return err })
		want(1, 0, 0, "allow all of a key's windows", func() error {
			_, err := allowAllAt(ctx, at, 1, store.Quota{Store: ss[0], Key: "k", Limit: 100}, store.Quota{Store: ss[1], Key: "k", Limit: 100},
				store.Quota{Store: ss[2], Key: "k", Limit: 100})
			return err
		})
		want(1, 0, 0, "allow all across keys", func() error {
			_, err := allowAllAt(ctx, at, 1, store.Quota{Store: ss[0], Key: "k", Limit: 100}, store.Quota{Store: ss[0], Key: "ip", Limit: 100})
			return err
		})
		want(1, 0, 0, "a distinct add", func() error {
			_, err := ss[0].At(at).RecordStat(ctx, store.StatEvent{Key: "d", Stat: store.StatDistinct, Members: []string{"a", "b"}})
			return err
		})
		want(1, 0, 0, "a window maximum", func() error {
			_, err := ss[0].At(at).RecordStat(ctx, store.StatEvent{Key: "x", Stat: store.StatMax, Value: 7})
			return err
		})
		want(1, 0, 0, "a feature set's event", func() error {
			_, err := fs.At(at).Record(ctx, features.Event{Entities: map[string]string{"user": "u", "ip": "i"}, Amount: 3})
			return err
		})
		want(0, 0, 1, "allow all refused", func() error {
			_, err := allowAllAt(ctx, at, 1, store.Quota{Store: ss[0], Key: "k", Limit: 3}, store.Quota{Store: ss[1], Key: "k", Limit: 100})
			return err
		})
		want(0, 1, 0, "a refusal after a bucket started", func() error {
			_, err := ss[0].At(at.Add(time.Second)).Allow(ctx, "k", 3, 1)
			return err
		})
		want(0, 0, 1, "an event id", func() error {
			_, err := ss[0].At(at).Record(ctx, store.Event{Key: "k", Delta: 1, ID: "e1"})
			return err
		})
		want(0, 0, 1, "a late event", func() error {
			_, err := ss[0].At(at).Record(ctx, store.Event{Key: "k", Delta: 1, Time: at.Add(-3 * time.Second)})
			return err
		})
		want(1, 0, 0, "a move on", func() error { _, err := ss[0].At(at.Add(1500*time.Millisecond)).Add(ctx, "k", 1); return err })
	})
}

// TestFastPathRecordByWindow: the fast path finds a window's record in its
// head by the record's window, not by the place its limit has in the call:
// 10s/1s and 12s/3s, whose records agree on their current and oldest buckets
// in a 3 s bucket's first second, limited in the order their records are not.
func TestFastPathRecordByWindow(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		prefix := harness.Prefix(t)
		tag := strings.ReplaceAll(prefix, ":", "")
		ss := traced(t, c, prefix, tag, false)
		s3 := tracedWindow(t, c, prefix, tag, false, w12s3s)
		var err error
		at := time.Date(2026, 5, 1, 10, 0, 0, 100e6, time.UTC) // a 3 s bucket's first second
		// Records made in both orders (k: 12s/3s first), each limited in
		// both orders.
		for _, key := range []string{"k", "j"} {
			first, second := s3, ss[0]
			if key == "j" {
				first, second = ss[0], s3
			}
			_, err = first.At(at).Add(ctx, key, map[*store.Store]int64{s3: 1, ss[0]: 5}[first])
			require.NoError(t, err)
			_, err = second.At(at).Add(ctx, key, map[*store.Store]int64{s3: 1, ss[0]: 5}[second])
			require.NoError(t, err)
			for i, order := range [][]*store.Store{{s3, ss[0]}, {ss[0], s3}} {
				d, err := allowAllAt(ctx, at.Add(200*time.Millisecond), 1, store.Quota{Store: order[0], Key: key, Limit: 100},
					store.Quota{Store: order[1], Key: key, Limit: 100})
				require.NoError(t, err)
				want := map[*store.Store]int64{s3: int64(2 + i), ss[0]: int64(6 + i)}
				require.Equal(t, []int64{want[order[0]], want[order[1]]}, []int64{d.Policies[0].Sum, d.Policies[1].Sum}, "%s, order %d", key, i)
			}
		}
		p, err := hook.Paths(ctx, ss[0], tag)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"fast": 8, "refuse": 0, "event": 0}, withZeros(p))
	})
}

func withZeros(p map[string]int64) map[string]int64 {
	out := map[string]int64{"fast": 0, "refuse": 0, "event": 0}
	for k, v := range p {
		out[k] = v
	}
	return out
}

// TestSumHeadDifferential: the plain hash's sums from the heads (ws_sumrun in
// nativehash/lua/plain.lua: a run's heads in one MGET, each record through
// ws_recsum) answer what the general path (ws_open, as a write opens a
// counter) answers, on the same keys: two readers of one
// prefix, one with the test-only switch on, read SumMany and Sum after random
// writes (amounts near 2^53 and negative ones), a clock that moves by less
// than a bucket, by buckets, past the sweep (60 buckets) and past every
// window, heads deleted or garbled, a bucket field that is not an integer,
// and keys of the wrong type (a hash beside its head too). Every answer and
// error must be the same; the run must have answered many reads, and the
// switched reader none.
func TestSumHeadDifferential(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		p := harness.Prefix(t)
		tag := strings.ReplaceAll(p, ":", "")
		rng := rand.New(rand.NewPCG(5, 2))
		type side struct{ w, fast, slow *store.Store }
		var sides []side
		for _, w := range []store.Window{{Length: 10 * time.Second, Bucket: time.Second}, {Length: time.Minute, Bucket: time.Second}} {
			sides = append(sides, side{w: plainStore(t, c, p, w), fast: plainStore(t, c, p, w, hook.WithTrace(tag+"f", false).(store.Option)),
				slow: plainStore(t, c, p, w, hook.WithTrace(tag+"g", true).(store.Option))})
		}
		keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
		at := time.Date(2026, 12, 31, 23, 58, 30, 0, time.UTC)
		for step := 0; step < 500; step++ {
			switch r := rng.IntN(30); {
			case r == 0:
				at = at.Add(time.Duration(10+rng.Int64N(60)) * time.Second) // past the sweep, or every window
			case r < 6:
				at = at.Add(time.Duration(1+rng.Int64N(3)) * time.Second)
			default:
				at = at.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
			}
			sd := sides[rng.IntN(len(sides))]
			k := keys[rng.IntN(len(keys))]
			ks, err := hook.CounterKeys(sd.w, k)
			require.NoError(t, err)
			switch r := rng.IntN(40); {
			case r == 0: // the head lost: the general path reads the hash whole
				require.NoError(t, c.Do(ctx, c.B().Del().Key(ks[1]).Build()).Error())
			case r == 1: // a head that is not a counter's
				require.NoError(t, c.Do(ctx, c.B().Set().Key(ks[1]).Value("garbled").Build()).Error())
			case r == 2: // a bucket that is not an integer
				fields, _ := c.Do(ctx, c.B().Hkeys().Key(ks[0]).Build()).AsStrSlice() // (none: a list there)
				if len(fields) > 0 {
					require.NoError(t, c.Do(ctx, c.B().Hset().Key(ks[0]).FieldValue().FieldValue(fields[rng.IntN(len(fields))], "x").Build()).Error())
				}
			case r == 3: // a key of the wrong type
				require.NoError(t, c.Do(ctx, c.B().Del().Key(ks...).Build()).Error())
				require.NoError(t, c.Do(ctx, c.B().Rpush().Key(ks[rng.IntN(2)]).Element("x").Build()).Error())
			case r == 4: // a hash of the wrong type beside its head
				require.NoError(t, c.Do(ctx, c.B().Del().Key(ks[0]).Build()).Error())
				require.NoError(t, c.Do(ctx, c.B().Rpush().Key(ks[0]).Element("x").Build()).Error())
			case r < 6: // a fresh start
				require.NoError(t, c.Do(ctx, c.B().Del().Key(ks...).Build()).Error())
			default:
				d := 1 + rng.Int64N(20)
				switch rng.IntN(8) {
				case 0:
					d = hugeValue(rng)
				case 1:
					d = -rng.Int64N(30)
				}
				_, _ = sd.w.At(at.Add(-time.Duration(rng.Int64N(int64(3*time.Second))))).Add(ctx, k, d) // (late, or failing on a garbled key)
			}
			read := rng.Perm(len(keys))[:1+rng.IntN(len(keys))]
			many := make([]string, 0, len(read)+1)
			for _, i := range read {
				many = append(many, keys[i])
			}
			many = append(many, many[0]) // a key twice
			fa, ea := sd.fast.At(at).SumMany(ctx, many)
			fb, eb := sd.slow.At(at).SumMany(ctx, many)
			require.Equal(t, errText(eb, p), errText(ea, p), "step %d at %v: SumMany's errors", step, at)
			require.Equal(t, fb, fa, "step %d at %v: SumMany", step, at)
			oa, ea := sd.fast.At(at).Sum(ctx, k)
			ob, eb := sd.slow.At(at).Sum(ctx, k)
			require.Equal(t, errText(eb, p), errText(ea, p), "step %d at %v: Sum's errors", step, at)
			require.Equal(t, ob, oa, "step %d at %v: Sum", step, at)
		}
		pf, err := hook.Paths(ctx, sides[0].fast, tag+"f")
		require.NoError(t, err)
		pg, err := hook.Paths(ctx, sides[0].slow, tag+"g")
		require.NoError(t, err)
		t.Logf("paths: head side %v, general side %v", pf, pg)
		require.Greater(t, pf["sumrun"], int64(300), "the run of heads answered too few sums to compare: %v", pf)
		require.Greater(t, pf["sumopen"], int64(50), "too few sums left the head: %v", pf)
		require.Zero(t, pg["sumhead"]+pg["sumrun"], "the switch did not keep the head paths off: %v", pg)
		require.Positive(t, pg["sumopen"], "%v", pg)
	})
}

// TestHeadRecordNotACounter: a head of the right length whose record holds a
// number that is not an integer (a fraction, or 2^53) is not a counter's:
// every read and write of that counter fails with ErrWrongType on either
// path, and writes nothing (every key's bytes the same before and after).
func TestHeadRecordNotACounter(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		p := harness.Prefix(t)
		tag := strings.ReplaceAll(p, ":", "")
		for _, general := range []bool{false, true} {
			ss := traced(t, c, fmt.Sprintf("%s%v:", p, general), tag, general)
			at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
			for fi, bad := range []float64{0.5, 1 << 53} {
				k := fmt.Sprint("k", fi)
				for _, s := range ss {
					_, err := s.At(at).Add(ctx, k, 3)
					require.NoError(t, err)
				}
				_, err := ss[1].At(at).Sum(ctx, k) // (a check of the record passed, in an earlier call)
				require.NoError(t, err)
				ks, err := hook.CounterKeys(ss[1], k)
				require.NoError(t, err)
				head, err := c.Do(ctx, c.B().Get().Key(ks[1]).Build()).AsBytes()
				require.NoError(t, err)
				require.Len(t, head, 3*48, "three records of six doubles")
				// The second record's running total t (its fourth number).
				binary.LittleEndian.PutUint64(head[48+3*8:], math.Float64bits(bad))
				require.NoError(t, c.Do(ctx, c.B().Set().Key(ks[1]).Value(string(head)).Keepttl().Build()).Error())
				before := takeSnapshot(t, ctx, []rueidis.Client{c}, p)
				s := ss[1].At(at)
				_, err = s.Add(ctx, k, 1)
				require.ErrorIs(t, err, store.ErrWrongType, "add, %v, general %v", bad, general)
				_, err = s.Allow(ctx, k, 100, 1)
				require.ErrorIs(t, err, store.ErrWrongType, "allow, %v, general %v", bad, general)
				_, err = s.Allow(ctx, k, 0, 1)
				require.ErrorIs(t, err, store.ErrWrongType, "a refusal, %v, general %v", bad, general)
				_, err = s.Sum(ctx, k)
				require.ErrorIs(t, err, store.ErrWrongType, "sum, %v, general %v", bad, general)
				_, err = allowAllAt(ctx, at, 1, store.Quota{Store: ss[0], Key: k, Limit: 100},
					store.Quota{Store: ss[1], Key: k, Limit: 100}, store.Quota{Store: ss[2], Key: k, Limit: 100})
				require.ErrorIs(t, err, store.ErrWrongType, "allow3, %v, general %v", bad, general)
				after := takeSnapshot(t, ctx, []rueidis.Client{c}, p)
				require.Equal(t, before.keys, after.keys, "%v, general %v: written", bad, general)
				// The other windows' records are still counters.
				_, err = ss[0].At(at).Sum(ctx, k)
				require.NoError(t, err)
			}
		}
	})
}

// TestSumRunLookbacks: a run of heads (ws_sumrun) takes the sums of one shape
// and lookback only. Sums of one counter over its whole window and over a
// shorter lookback (an Over view) from 40 callers at one instant share script
// calls, and each answers its own window's sum.
func TestSumRunLookbacks(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		p := harness.Prefix(t)
		tag := strings.ReplaceAll(p, ":", "")
		s := plainStore(t, c, p, store.Window{Length: 10 * time.Second, Bucket: time.Second}, hook.WithTrace(tag, false).(store.Option))
		at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
		for _, w := range []struct {
			ago time.Duration
			n   int64
		}{{8 * time.Second, 5}, {time.Second, 7}} {
			_, err := s.At(at.Add(-w.ago)).Add(ctx, "k", w.n)
			require.NoError(t, err)
		}
		_, err := s.At(at).Add(ctx, "k", 0) // (the head synced at the instant read)
		require.NoError(t, err)
		var wrong atomic.Int64
		var wg sync.WaitGroup
		for g := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					v, want := s.At(at), int64(12)
					if (g+i)%2 == 1 {
						v, want = s.At(at).Over(5*time.Second), 7
					}
					n, err := v.Sum(ctx, "k")
					if err != nil || n != want {
						wrong.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		require.Zero(t, wrong.Load(), "sums that answered another lookback's window, or failed")
		paths, err := hook.Paths(ctx, s, tag)
		require.NoError(t, err)
		require.Positive(t, paths["sumrun"], "the run of heads answered no sum: %v", paths)
	})
}

// TestSumPastItsWindow: a record whose current bucket has left its window is
// read whole, never swept: the window's hash expired with that bucket, while
// the key's head lives on for another window's record. On the server's
// clock: a 1 s window of 100 ms buckets counts 5, then 7 a bucket later; a
// 1 min window of the same key keeps the head. Once the hash has expired
// (read after the fact), the 1 s window's sum is 0, never 5.
func TestSumPastItsWindow(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		p := harness.Prefix(t)
		short := plainStore(t, c, p, store.Window{Length: time.Second, Bucket: 100 * time.Millisecond})
		long := plainStore(t, c, p, store.Window{Length: time.Minute, Bucket: time.Second})
		_, err := short.Add(ctx, "k", 5)
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
		_, err = short.Add(ctx, "k", 7)
		require.NoError(t, err)
		_, err = long.Add(ctx, "k", 1)
		require.NoError(t, err)
		ks, err := hook.CounterKeys(short, "k")
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			n, err := c.Do(ctx, c.B().Exists().Key(ks[0]).Build()).AsInt64()
			return err == nil && n == 0
		}, 10*time.Second, 50*time.Millisecond, "the 1 s window's hash never expired")
		n, err := c.Do(ctx, c.B().Exists().Key(ks[1]).Build()).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the head expired too: the case is not made")
		sum, err := short.Sum(ctx, "k")
		require.NoError(t, err)
		require.Zero(t, sum, "Sum")
		many, err := short.SumMany(ctx, []string{"k", "k"})
		require.NoError(t, err)
		require.Equal(t, []int64{0, 0}, many, "SumMany")
	})
}

// TestSumHashOfWrongType: a counter whose hash is of another type beside a
// head whose record has moved on (so a read must sweep the hash) fails with
// ErrWrongType on every read and write, and writes nothing.
func TestSumHashOfWrongType(t *testing.T) {
	forPlain(t, func(t *testing.T, c rueidis.Client, ctx context.Context) {
		p := harness.Prefix(t)
		s := plainStore(t, c, p, store.Window{Length: 10 * time.Second, Bucket: time.Second})
		at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
		for i := range 3 {
			_, err := s.At(at.Add(time.Duration(i)*time.Second)).Add(ctx, "k", 2)
			require.NoError(t, err)
		}
		ks, err := hook.CounterKeys(s, "k")
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, c.B().Del().Key(ks[0]).Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().Rpush().Key(ks[0]).Element("x").Build()).Error())
		v := s.At(at.Add(5 * time.Second)) // (the record's bucket is live, buckets before the last write's window have left)
		before := takeSnapshot(t, ctx, []rueidis.Client{c}, p)
		_, err = v.Sum(ctx, "k")
		require.ErrorIs(t, err, store.ErrWrongType, "Sum")
		_, err = v.SumMany(ctx, []string{"k"})
		require.ErrorIs(t, err, store.ErrWrongType, "SumMany")
		_, err = v.Add(ctx, "k", 1)
		require.ErrorIs(t, err, store.ErrWrongType, "Add")
		_, err = v.Allow(ctx, "k", 100, 1)
		require.ErrorIs(t, err, store.ErrWrongType, "Allow")
		require.Equal(t, before.keys, takeSnapshot(t, ctx, []rueidis.Client{c}, p).keys, "written")
	})
}
