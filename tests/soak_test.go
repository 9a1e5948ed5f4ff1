package tests

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/store"
)

// soakKey is what the soak's client knows of one key: when each of its adds
// (of 1) started and ended. Calls on one key take its lock, so that the
// bounds below see every add that can have counted.
type soakKey struct {
	mu   sync.Mutex
	adds [][2]time.Time
}

// bounds returns what a sum read by a call that ran from start to end must
// lie within, on the server's clock (which is this host's clock):
//
//   - at most the adds that ended after start - (window + bucket): no older
//     event is in the window;
//   - at least the adds that ended before start and began after
//     end - (window - bucket): a bucket holds every event younger than
//     window - bucket (2 ms of slack for the server's millisecond clock).
func (k *soakKey) bounds(w store.Window, start, end time.Time) (lo, hi int64) {
	for _, a := range k.adds {
		if a[1].After(start.Add(-w.Length - w.Bucket)) {
			hi++
		}
		if !a[1].After(start) && a[0].After(end.Add(-w.Length+w.Bucket+2*time.Millisecond)) {
			lo++
		}
	}
	return lo, hi
}

// prune drops the adds that no later sum can count.
func (k *soakKey) prune(w store.Window, now time.Time) {
	keep := k.adds[:0]
	for _, a := range k.adds {
		if a[1].After(now.Add(-2 * (w.Length + w.Bucket))) {
			keep = append(keep, a)
		}
	}
	k.adds = keep
}

// TestSoak runs a bounded window workload on each backend: 2,000 keys with
// 200 ms buckets expiring all the time, adds and sums from 16 goroutines. It is
// the workload that crashed the TairHash module (see package tairhash); the
// server must still answer afterwards. Every sum lies within what the client
// itself added to that key in the window (see soakKey.bounds), and once window
// + bucket has passed after the last add, every sum is 0. The duration is
// WINDOWSTORE_SOAK (default 3s); the loop stops by itself.
func TestSoak(t *testing.T) {
	t.Parallel()
	d := 3 * time.Second
	if v := os.Getenv("WINDOWSTORE_SOAK"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		require.NoError(t, err)
	}
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: time.Second, Bucket: 200 * time.Millisecond}
		s, srv := newStore(t, tg, w)
		const nkeys = 2000
		keys := make([]soakKey, nkeys)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var calls, sums, errs atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					ki := (g*7919 + i*31) % nkeys
					k := &keys[ki]
					name := strconv.Itoa(ki)
					k.mu.Lock()
					var err error
					var n int64
					start := time.Now()
					add := i%4 != 3
					if add {
						n, err = s.Add(ctx, name, 1)
					} else {
						n, err = s.Sum(ctx, name)
					}
					end := time.Now()
					if err != nil {
						k.mu.Unlock()
						if ctx.Err() == nil {
							errs.Add(1)
							t.Errorf("call %d on %s: %v", i, name, err)
						}
						return
					}
					lo, hi := k.bounds(w, start, end)
					if add {
						lo, hi = lo+1, hi+1 // its own add
						k.adds = append(k.adds, [2]time.Time{start, end})
					}
					if i%64 == 0 {
						k.prune(w, end)
					}
					k.mu.Unlock()
					if n < lo || n > hi {
						t.Errorf("key %s: sum %d outside [%d, %d], the adds this client made in the window (call from %v to %v)",
							name, n, lo, hi, start.Format("15:04:05.000"), end.Format("15:04:05.000"))
						return
					}
					calls.Add(1)
					if !add {
						sums.Add(1)
					}
				}
			}(g)
		}
		wg.Wait()
		c := srv.Client(t)
		require.NoError(t, c.Do(context.Background(), c.B().Ping().Build()).Error(), "the server died under the soak")
		t.Logf("%s: %d calls (%d sums) in %v, %d errors, every sum within its bounds", tg.name, calls.Load(), sums.Load(), d, errs.Load())
		// Everything leaves the window.
		var last time.Time
		names := make([]string, nkeys)
		for i := range keys {
			names[i] = strconv.Itoa(i)
			for _, a := range keys[i].adds {
				if a[1].After(last) {
					last = a[1]
				}
			}
		}
		time.Sleep(time.Until(last.Add(w.Length + w.Bucket)))
		got, err := s.SumMany(ctxT(t), names)
		require.NoError(t, err)
		for i, n := range got {
			require.Zero(t, n, "key %s still counts %d after window + bucket", names[i], n)
		}
	})
}
