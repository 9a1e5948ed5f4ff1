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

// TestSoak runs a bounded window workload on each backend: 2,000 keys with
// 200 ms buckets expiring all the time, adds and sums from 16 goroutines. It is
// the workload that crashed the TairHash module (see package tairhash); the
// server must still answer afterwards and every sum must stay in range. The
// duration is WINDOWSTORE_SOAK (default 3s); the loop stops by itself.
func TestSoak(t *testing.T) {
	d := 3 * time.Second
	if v := os.Getenv("WINDOWSTORE_SOAK"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		require.NoError(t, err)
	}
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: time.Second, Bucket: 200 * time.Millisecond}
		s, srv := newStore(t, tg, w)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var calls, errs atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					k := strconv.Itoa((g*7919 + i*31) % 2000)
					var err error
					var n int64
					if i%4 == 3 {
						n, err = s.Sum(ctx, k)
					} else {
						n, err = s.Add(ctx, k, 1)
					}
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
							t.Errorf("call %d: %v", i, err)
						}
						return
					}
					if n < 0 || n > 1<<20 {
						t.Errorf("sum %d out of range", n)
						return
					}
					calls.Add(1)
				}
			}(g)
		}
		wg.Wait()
		c := srv.Client(t)
		require.NoError(t, c.Do(context.Background(), c.B().Ping().Build()).Error(), "the server died under the soak")
		t.Logf("%s: %d calls in %v, %d errors", tg.name, calls.Load(), d, errs.Load())
	})
}
