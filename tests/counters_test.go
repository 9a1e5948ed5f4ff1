package tests

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
