package tests

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	redis_rate "github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// gcraKind is the GCRA as a limiterKind of rate lim per w with a burst of
// lim, for the tests that measure every algorithm (TestLimiterMemory). It is
// not in limiterKinds: those tests assume a window, and a GCRA frees its
// units one by one.
var gcraKind = limiterKind{"gcra", "gcra", func(t *testing.T, c rueidis.Client, prefix string, lim int64, w time.Duration) limit.Limiter {
	l, err := limit.NewGCRA(c, "gcra", lim, w, lim, limit.WithPrefix(prefix))
	require.NoError(t, err)
	return l
}}

// gcraServers are the servers the GCRA tests run on: its script uses only
// core commands.
var gcraServers = []harness.Kind{harness.Redis70, harness.Redis80, harness.Valkey}

// forGCRAServers runs f on each of gcraServers' shared servers, as parallel
// subtests named after the server.
func forGCRAServers(t *testing.T, f func(t *testing.T, srv *harness.Server)) {
	for _, kind := range gcraServers {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			f(t, harness.Shared(t, kind))
		})
	}
}

// gcraStep is a call of the comparison with redis_rate: n units at offset
// from the sequence's start.
type gcraStep struct {
	offset time.Duration
	n      int64
}

// TestGCRAMatchesRedisRate runs one sequence of AllowN calls against
// go-redis/redis_rate v10 and against limit.NewGCRA on one server, each call
// to one right after the same call to the other, and compares the decisions.
//
// The two read the server's clock a fraction of a ms apart (and redis_rate in
// µs, the GCRA in ms), so a call must not fall where a decision changes: a
// whole number of emission intervals (T = 250 ms) after the instant the key
// was last fresh. The calls come in bursts at instants 50 ms apart modulo T,
// and the key is fresh only at the first and at the fourth, so every call is
// at least 50 ms from such a boundary (a burst of calls takes a few ms).
//
// It is not parallel with the suite's other tests (only its three servers'
// runs are parallel with each other): it runs before them, on a quiet
// machine, since its calls must come on time.
func TestGCRAMatchesRedisRate(t *testing.T) {
	const (
		rate   = 4
		period = time.Second
		burst  = 5
	)
	var steps []gcraStep
	at := func(ms int, ns ...int64) {
		for _, n := range ns {
			steps = append(steps, gcraStep{time.Duration(ms) * time.Millisecond, n})
		}
	}
	// In units of T: 0 ≡ 0, 300 ≡ 50, 850 ≡ 100, 2650 ≡ 150 (fresh again:
	// its TAT was 2250), 3200 ≡ 200 and ≡ 50 after 2650.
	at(0, 1, 0, 2, 6, 3, 2, 1, 0) // n > burst, a cost over what is free, the burst used up
	at(300, 2, 1, 1, 0)           // one unit has come back
	at(850, 1, 0, 1, 1, 3)        // two more
	at(2650, 5, 1, 0, 5)          // fresh: the whole burst at once
	at(3200, 3, 2, 7, 1, 0)
	forGCRAServers(t, func(t *testing.T, srv *harness.Server) {
		ctx := ctxT(t)
		gr := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = gr.Close() })
		rr := redis_rate.NewLimiter(gr)
		rrLimit := redis_rate.Limit{Rate: rate, Burst: burst, Period: period}
		prefix := harness.Prefix(t)
		l, err := limit.NewGCRA(srv.Client(t), "gcra", rate, period, burst, limit.WithPrefix(prefix+"ws:"))
		require.NoError(t, err)
		var admitted, refused, never int
		// run plays the sequence on keys of its own; it gives up (false)
		// when a call comes more than slack late, or a pair of calls
		// takes longer than slack: the two limiters would then decide at
		// instants too far apart to compare (a loaded machine). Times
		// are compared within the pair's own duration and the slowest
		// pair's (the one that set the state may be it), plus 3 ms.
		const slack = 30 * time.Millisecond
		// Warm up: connections made, script loaded.
		_, err = rr.AllowN(ctx, prefix+"warm", rrLimit, 1)
		require.NoError(t, err)
		_, err = l.Allow(ctx, "warm", 1)
		require.NoError(t, err)
		run := func(try int) bool {
			admitted, refused, never = 0, 0, 0
			key := "k" + strconv.Itoa(try)
			var slowest time.Duration // a key's times are offset by the pair that set them
			start := time.Now()
			for i, s := range steps {
				time.Sleep(time.Until(start.Add(s.offset)))
				t0 := time.Now()
				if late := t0.Sub(start.Add(s.offset)); late > slack {
					t.Logf("try %d: call %d came %v late: again", try, i, late)
					return false
				}
				want, err := rr.AllowN(ctx, prefix+key, rrLimit, int(s.n))
				require.NoError(t, err)
				got, err := l.Allow(ctx, key, s.n)
				require.NoError(t, err)
				pair := time.Since(t0)
				if pair > slack {
					t.Logf("try %d: call %d's pair took %v: again", try, i, pair)
					return false
				}
				slowest = max(slowest, pair)
				msg := fmt.Sprintf("call %d (%d at %v): redis_rate %+v, gcra %+v", i, s.n, s.offset, *want, got)
				// redis_rate answers RetryAfter -1 when it admits, and
				// Allowed, the units admitted, 0 for a cost of 0.
				require.Equal(t, want.RetryAfter == -1, got.Allowed, msg)
				require.EqualValues(t, burst, got.Limit, msg)
				closeTo := func(a, b time.Duration) bool { return (a - b).Abs() <= pair+slowest+3*time.Millisecond }
				require.True(t, closeTo(want.ResetAfter, got.ResetAfter), "ResetAfter: "+msg)
				switch {
				case got.Allowed:
					admitted++
					require.EqualValues(t, s.n, want.Allowed, msg)
					require.EqualValues(t, want.Remaining, got.Remaining, msg)
					require.Zero(t, got.RetryAfter, msg)
				case s.n > burst:
					// redis_rate gives a time at which the cost will not fit
					// either; the Limiter contract says -1.
					never++
					require.Equal(t, time.Duration(-1), got.RetryAfter, msg)
					require.Less(t, got.Remaining, s.n, msg)
				default:
					refused++
					require.True(t, closeTo(want.RetryAfter, got.RetryAfter), "RetryAfter: "+msg)
					// redis_rate reports 0 remaining on a refusal; the GCRA
					// reports the units free now, which fall short of n.
					require.Less(t, got.Remaining, s.n, msg)
					if s.n == 1 {
						require.Zero(t, got.Remaining, msg)
					}
				}
			}
			return true
		}
		const tries = 8
		for try := 0; !run(try); try++ {
			if try == tries-1 {
				t.Fatalf("the machine was too slow for the sequence to mean anything, %d times", tries)
			}
		}
		t.Logf("%d admitted, %d refused, %d never fit, all as redis_rate decided", admitted, refused, never)
		require.Positive(t, admitted)
		require.Positive(t, refused)
		require.Positive(t, never)
	})
}

// TestGCRAExactUnderConcurrency: of 48 concurrent callers on one key, with a
// rate so slow that nothing comes back meanwhile, exactly burst are admitted,
// each seeing one unit fewer remaining.
func TestGCRAExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	forGCRAServers(t, func(t *testing.T, srv *harness.Server) {
		const burst = 10
		l, err := limit.NewGCRA(srv.Client(t), "gcra", 1, time.Hour, burst, limit.WithPrefix(harness.Prefix(t)))
		require.NoError(t, err)
		var mu sync.Mutex
		var remaining []int64
		var wg sync.WaitGroup
		for i := 0; i < 48; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.Allow(context.Background(), "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					// The next unit comes back an hour after the first call.
					if d.RetryAfter <= 59*time.Minute || d.RetryAfter > time.Hour || d.Remaining != 0 {
						t.Errorf("refused with %+v", d)
					}
					return
				}
				mu.Lock()
				remaining = append(remaining, d.Remaining)
				mu.Unlock()
			}()
		}
		wg.Wait()
		slices.Sort(remaining)
		require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, remaining)
	})
}

// TestGCRARetryAfterExact: with an emission interval that is not a whole
// number of ms (1 s / 7), a retry at RetryAfter succeeds and one a ms before
// fails; the whole burst is free at ResetAfter and not a ms before; a cost of
// 0 is admitted and writes nothing; refusals change nothing; the key expires
// when it is fresh again.
func TestGCRARetryAfterExact(t *testing.T) {
	t.Parallel()
	forGCRAServers(t, func(t *testing.T, srv *harness.Server) {
		c := srv.Client(t)
		ctx := ctxT(t)
		prefix := harness.Prefix(t)
		// 7 a minute: the key expires when its state drains, on the server's
		// clock, and at 7 a second it drained between two reads of this test
		// under CI's load. At 7 a minute it lives for seconds.
		const burst, per = 3, time.Minute
		l, err := limit.NewGCRA(c, "gcra", 7, per, burst, limit.WithPrefix(prefix))
		require.NoError(t, err)
		rk := prefix + "{k}:gcra"
		now := time.Now()
		d, err := l.AllowAt(ctx, now, "k", 0)
		require.NoError(t, err)
		require.Equal(t, store.Decision{Allowed: true, Limit: burst, Remaining: burst, Policy: "gcra"}, d)
		require.EqualValues(t, 0, existsKey(t, c, rk), "a cost of 0 wrote the key")
		for round := 0; round < 6; round++ {
			n := int64(1 + round%burst)
			d, err := l.AllowAt(ctx, now, "k", n)
			require.NoError(t, err)
			if d.Allowed {
				require.GreaterOrEqual(t, d.ResetAfter, time.Duration(n)*per/7)
				continue
			}
			require.Positive(t, d.RetryAfter, "round %d", round)
			state := keyState(t, c, rk)
			before, err := l.AllowAt(ctx, now.Add(d.RetryAfter-time.Millisecond), "k", n)
			require.NoError(t, err)
			require.False(t, before.Allowed, "admitted a ms before RetryAfter %v (round %d)", d.RetryAfter, round)
			require.Equal(t, state, keyState(t, c, rk), "a refusal changed the key")
			now = now.Add(d.RetryAfter)
			at, err := l.AllowAt(ctx, now, "k", n)
			require.NoError(t, err)
			require.True(t, at.Allowed, "refused at RetryAfter %v (round %d)", d.RetryAfter, round)
		}
		d, err = l.AllowAt(ctx, now, "k", 0)
		require.NoError(t, err)
		require.Positive(t, d.ResetAfter)
		pttl, err := c.Do(ctx, c.B().Pttl().Key(rk).Build()).AsInt64()
		require.NoError(t, err)
		require.Positive(t, pttl)
		require.LessOrEqual(t, pttl, d.ResetAfter.Milliseconds())
		before, err := l.AllowAt(ctx, now.Add(d.ResetAfter-time.Millisecond), "k", 0)
		require.NoError(t, err)
		require.EqualValues(t, burst-1, before.Remaining, "all free a ms before ResetAfter %v", d.ResetAfter)
		after, err := l.AllowAt(ctx, now.Add(d.ResetAfter), "k", 0)
		require.NoError(t, err)
		require.EqualValues(t, burst, after.Remaining)
		require.Zero(t, after.ResetAfter)
		never, err := l.AllowAt(ctx, now, "k2", burst+1)
		require.NoError(t, err)
		require.Equal(t, store.Decision{Allowed: false, Limit: burst, Remaining: burst, RetryAfter: -1, Policy: "gcra"}, never)
		_, err = l.Allow(ctx, "k", -1)
		require.ErrorIs(t, err, store.ErrInvalid)
		// A key of another type is an error, and is left alone.
		require.NoError(t, c.Do(ctx, c.B().Set().Key(prefix+"{x}:gcra").Value("not a state").Build()).Error())
		_, err = l.Allow(ctx, "x", 1)
		require.ErrorContains(t, err, "WRONGTYPE")
	})
}

func existsKey(t *testing.T, c rueidis.Client, key string) int64 {
	n, err := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return n
}

// keyState is a key's value (DUMP) and its expiry instant (PEXPIRETIME):
// any write changes one or the other, however small.
func keyState(t *testing.T, c rueidis.Client, key string) [2]string {
	at, err := c.Do(context.Background(), c.B().Pexpiretime().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return [2]string{dump(t, c, key)[0], strconv.FormatInt(at, 10)}
}

// gcraModel is the GCRA on big integers, as limit.NewGCRA states it: the
// theoretical arrival time in units of 1/q ms (the emission interval is
// p / q ms), absent when the key is fresh.
type gcraModel struct {
	p, q, burst int64
	tat         *big.Int // nil: fresh
}

// step applies a cost of n (negative: units given back) at instant now (Unix
// ms) and answers the reply limit's script gives: allowed, used, retry ms
// (-1: never), reset ms.
func (m *gcraModel) step(now, n int64) (bool, int64, int64, int64) {
	bp, bq := big.NewInt(m.p), big.NewInt(m.q)
	nowU := new(big.Int).Mul(big.NewInt(now), bq)
	rel := new(big.Int)
	if m.tat != nil && m.tat.Cmp(nowU) > 0 {
		rel.Sub(m.tat, nowU)
	}
	capU := new(big.Int).Mul(big.NewInt(m.burst), bp)
	// floored, as the script's idiv: big.Int's Div is Euclidean, which is
	// floored for b > 0
	floorDiv := func(a, b *big.Int) int64 { return new(big.Int).Div(a, b).Int64() }
	ceilMs := func(x *big.Int) int64 { return -floorDiv(new(big.Int).Neg(x), bq) }
	free := max(floorDiv(new(big.Int).Sub(capU, rel), bp), 0)
	if n > m.burst {
		return false, m.burst - free, -1, ceilMs(rel)
	}
	after := new(big.Int).Add(rel, new(big.Int).Mul(big.NewInt(n), bp))
	if after.Cmp(capU) > 0 {
		return false, m.burst - free, ceilMs(new(big.Int).Sub(after, capU)), ceilMs(rel)
	}
	if after.Sign() <= 0 {
		after.SetInt64(0)
		if n < 0 {
			m.tat = nil
		}
	} else if n != 0 {
		m.tat = new(big.Int).Add(nowU, after)
	}
	return true, m.burst - floorDiv(new(big.Int).Sub(capU, after), bp), 0, ceilMs(after)
}

// TestGCRAModel drives limit.NewGCRA with random costs, given back too (the
// negative cost windowstored's all-or-nothing decisions send, through
// limit.RefundAt), at client-clock instants, and compares every reply with
// gcraModel on big integers. The rates put the script's integers near 2^52:
// the TAT in units of 1/q ms relative to now reaches burst x p, and the
// bursts are the largest limit.NewGCRA accepts. A key whose state would
// expire on the server within 5 s of real time is deleted, in the model too
// (its expiry runs on the server's clock, not the calls'): the last case's
// state lasts at most 1 ms, so each of its calls starts from a fresh key.
func TestGCRAModel(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		rate   int64
		period time.Duration
		burst  int64 // 0: the largest accepted, 2^52 / the period in ms
	}{
		{"prime rate per hour", 999999937, time.Hour, 0},
		{"7 per hour", 7, time.Hour, 0},
		{"3 per minute, a burst of 10", 3, time.Minute, 10},
		{"2^53 per 2^20 ms", 1 << 53, 1 << 20 * time.Millisecond, 0},
	}
	forGCRAServers(t, func(t *testing.T, srv *harness.Server) {
		c := srv.Client(t)
		ctx := ctxT(t)
		for ci, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				pms := tc.period.Milliseconds()
				burst := tc.burst
				if burst == 0 {
					burst = (1 << 52) / pms
				}
				prefix := harness.Prefix(t)
				l, err := limit.NewGCRA(c, "model", tc.rate, tc.period, burst, limit.WithPrefix(prefix))
				require.NoError(t, err)
				g := gcdInt(pms, tc.rate)
				m := &gcraModel{p: pms / g, q: tc.rate / g, burst: burst}
				rk := prefix + "{k}:model" // as limit.NewGCRA names it (see limiterKind.redisKey)
				r := rand.New(rand.NewPCG(uint64(ci), 7))
				now := time.Now().UnixMilli()
				cost := func() int64 {
					switch r.IntN(6) {
					case 0:
						return 1
					case 1:
						return burst
					case 2:
						return burst + 1
					case 3:
						return 1 + r.Int64N(burst)
					default:
						return 1 + r.Int64N(max(burst/8, 1))
					}
				}
				horizon := burst * m.p / m.q // ms, the TAT's furthest reach ahead of now
				var refused, given, fresh int
				for i := 0; i < 300; i++ {
					switch r.IntN(4) {
					case 0:
					case 1:
						now++
					default:
						now += r.Int64N(max(horizon/20, 2))
					}
					var d store.Decision
					var n int64
					if r.IntN(3) == 0 {
						k := cost()
						n = -k
						d, err = limit.RefundAt(ctx, l, time.UnixMilli(now), "k", k)
						require.NoError(t, err)
						given++
					} else {
						n = cost()
						d, err = l.AllowAt(ctx, time.UnixMilli(now), "k", n)
						require.NoError(t, err)
					}
					ok, used, retry, reset := m.step(now, n)
					want := store.Decision{Policy: "model", Allowed: ok, Limit: burst, Remaining: max(0, burst-used),
						RetryAfter: time.Duration(retry) * time.Millisecond, ResetAfter: time.Duration(reset) * time.Millisecond}
					if retry < 0 {
						want.RetryAfter = -1
					}
					require.Equal(t, want, d, "call %d: cost %d at %d", i, n, now)
					if !ok {
						refused++
					}
					if m.tat != nil && reset < 5000 {
						// (It may have expired on its own already.)
						require.NoError(t, c.Do(ctx, c.B().Del().Key(rk).Build()).Error())
						m.tat = nil
					} else if m.tat != nil {
						n, err := c.Do(ctx, c.B().Exists().Key(rk).Build()).AsInt64()
						require.NoError(t, err)
						require.EqualValues(t, 1, n, "the key is not %s: the test deletes the wrong one", rk)
					}
					if m.tat == nil {
						fresh++
					}
				}
				t.Logf("300 calls: %d refused, %d give-backs, %d ended fresh", refused, given, fresh)
				require.Positive(t, refused)
			})
		}
	})
}

func gcdInt(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
