package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	redis_rate "github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/baseline"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// Benchmarks run on a real server: the kind in BENCH_KIND (default redis70),
// found like every other test server. Each op is one call from one of
// GOMAXPROCS*8 goroutines on one rueidis client, over 10k keys. The raw and
// naive baselines run in the same process on the same server, so ratios between
// them are meaningful; absolute figures depend on the machine.
//
//	cd tests && go test -run '^$' -bench . -benchtime 3s
const benchKeys = 10000

func benchServer(b *testing.B) (*harness.Server, rueidis.Client) {
	kind := harness.Kind(os.Getenv("BENCH_KIND"))
	if kind == "" {
		kind = harness.Redis70
	}
	srv := harness.Shared(b, kind)
	return srv, srv.Client(b)
}

func benchStore(b *testing.B, buckets int) *store.Store {
	_, c := benchServer(b)
	w := store.Window{Length: time.Duration(buckets) * time.Second, Bucket: time.Second}
	s, err := store.New(context.Background(), c, w, store.WithPrefix(fmt.Sprintf("bench:%d:", buckets)))
	if err != nil {
		b.Fatal(err)
	}
	// Fill every counter's window, so each op reads a full counter.
	ctx := context.Background()
	now := time.Now()
	for k := 0; k < benchKeys; k += 500 {
		var calls []func()
		for j := k; j < k+500 && j < benchKeys; j++ {
			key := strconv.Itoa(j)
			calls = append(calls, func() { // oldest bucket first
				for i := buckets - 1; i >= 0; i-- {
					if _, err := s.At(now.Add(-time.Duration(i)*time.Second)).Add(ctx, key, 1); err != nil {
						b.Error(err)
					}
				}
			})
		}
		parallel(calls)
	}
	return s
}

func parallel(fns []func()) {
	done := make(chan struct{}, 64)
	for _, f := range fns {
		done <- struct{}{}
		go func() { f(); <-done }()
	}
	for i := 0; i < cap(done); i++ {
		done <- struct{}{}
	}
}

func runParallel(b *testing.B, op func(ctx context.Context, key string) error) {
	b.SetParallelism(32) // 64 goroutines on 2 cores, as tools/bench
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			if err := op(ctx, strconv.Itoa(r.IntN(benchKeys))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkStore(b *testing.B) {
	for _, buckets := range []int{10, 60} {
		s := benchStore(b, buckets)
		b.Run(fmt.Sprintf("Add/buckets=%d", buckets), func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error { _, err := s.Add(ctx, k, 1); return err })
		})
		b.Run(fmt.Sprintf("AddNoSum/buckets=%d", buckets), func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error {
				_, err := s.Record(ctx, store.Event{Key: k, Delta: 1, NoSum: true})
				return err
			})
		})
		b.Run(fmt.Sprintf("Sum/buckets=%d", buckets), func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error { _, err := s.Sum(ctx, k); return err })
		})
		b.Run(fmt.Sprintf("Allow/buckets=%d", buckets), func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error {
				_, err := s.Allow(ctx, k, 1<<40, 1)
				return err
			})
		})
		b.Run(fmt.Sprintf("SumMany100/buckets=%d", buckets), func(b *testing.B) {
			keys := make([]string, 100)
			for i := range keys {
				keys[i] = strconv.Itoa(i * 97 % benchKeys)
			}
			runParallel(b, func(ctx context.Context, _ string) error { _, err := s.SumMany(ctx, keys); return err })
		})
	}
}

// BenchmarkBaseline measures, on the same server, the floor of server work
// (raw HINCRBY and HGETALL, auto-pipelined) and the textbook naive
// window script: the references for the ratios in docs/benchmarks.md.
func BenchmarkBaseline(b *testing.B) {
	for _, buckets := range []int{10, 60} {
		benchStore(b, buckets) // same data shape as BenchmarkStore
		_, c := benchServer(b)
		prefix := fmt.Sprintf("bench:%d:", buckets)
		fillNaive(b, c, prefix, buckets)
		b.Run(fmt.Sprintf("RawHINCRBY/buckets=%d", buckets), func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error {
				return c.Do(ctx, c.B().Hincrby().Key("raw:"+prefix+k).Field("1").Increment(1).Build()).Error()
			})
		})
		b.Run(fmt.Sprintf("RawHGETALL/buckets=%d", buckets), func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error {
				return c.Do(ctx, c.B().Hgetall().Key(prefix+k).Build()).Error()
			})
		})
		b.Run(fmt.Sprintf("NaiveLua/buckets=%d", buckets), func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error {
				return baseline.Naive.Exec(ctx, c, []string{"naive:" + prefix + k}, baseline.NaiveArgs(time.Now(), buckets)).Error()
			})
		})
	}
}

// fillNaive gives every naive counter a full window of one-second fields, as
// benchStore does for the store's counters, so both read counters of one size.
func fillNaive(b *testing.B, c rueidis.Client, prefix string, buckets int) {
	now := time.Now()
	cmds := make(rueidis.Commands, 0, benchKeys)
	for k := 0; k < benchKeys; k++ {
		cmds = append(cmds, baseline.NaiveFill(c, "naive:"+prefix+strconv.Itoa(k), buckets, now))
	}
	for _, r := range c.DoMulti(context.Background(), cmds...) {
		if err := r.Error(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllowPeers compares every limiter of this project with
// go-redis/redis_rate's GCRA (AllowN) on the same server, 10k keys, limits
// high enough that every call is admitted (the path that writes).
func BenchmarkAllowPeers(b *testing.B) {
	srv, c := benchServer(b)
	ctx := context.Background()
	w := 10 * time.Second
	st, err := store.New(ctx, c, store.Window{Length: w, Bucket: time.Second}, store.WithPrefix("peer:sw:"))
	if err != nil {
		b.Fatal(err)
	}
	sw, _ := limit.NewSlidingWindow(st, "sw", 1<<40)
	lg, _ := limit.NewLog(c, "log", 1<<40, w, limit.WithPrefix("peer:"))
	fx, _ := limit.NewFixedWindow(c, "fixed", 1<<40, w, limit.WithPrefix("peer:"))
	gc, _ := limit.NewGCRA(c, "gcra", 1<<30, w, 1<<30, limit.WithPrefix("peer:"))
	for _, l := range []limit.Limiter{sw, lg, fx, gc} {
		b.Run(l.Policy().Algorithm, func(b *testing.B) {
			runParallel(b, func(ctx context.Context, k string) error { _, err := l.Allow(ctx, k, 1); return err })
		})
	}
	gr := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 64})
	defer gr.Close()
	rl := redis_rate.NewLimiter(gr)
	lim := redis_rate.Limit{Rate: 1 << 30, Burst: 1 << 30, Period: w}
	b.Run("redis_rate-gcra", func(b *testing.B) {
		runParallel(b, func(ctx context.Context, k string) error {
			_, err := rl.AllowN(ctx, "peer:gcra:"+k, lim, 1)
			return err
		})
	})
}
