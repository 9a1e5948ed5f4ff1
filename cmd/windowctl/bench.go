package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/baseline"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// benchConfig is what `windowctl bench` measures.
type benchConfig struct {
	keys       int
	buckets    []int
	goroutines int
	duration   time.Duration
	ops        []string
	batchOps   int
	batchCalls int
}

var benchOps = []string{"add", "addnosum", "sum", "sum100", "allow", "naive", "zsetlog", "rawhincrby", "rawhgetall"}

const benchUsage = `usage: windowctl [--addr URL] [--backend B] bench [--keys N] [--buckets 10,60] [--goroutines N] [--duration D] [--ops LIST]
                 [--batch-ops N] [--batch-calls N]

Measures throughput (ops/s) and latency (p50, p99) of each operation with N
goroutines on one client, over N keys whose windows are full, with buckets of
1 s. Side by side, in the same run on the same server, it measures:

  naive       the seed documents' window script (HINCRBY, EXPIRE, HGETALL, sum, HDEL)
  zsetlog     the exact sliding log on a ZSET (package limit), limit 100 per window
  rawhincrby  raw HINCRBY, auto-pipelined: the floor of server work for a write
  rawhgetall  raw HGETALL of a full counter: the floor for a read

--batch-ops and --batch-calls set the store's write batching (see
store.WithBatching; --batch-ops 1 sends every write alone). The command prints
each operation's throughput as a ratio to the naive script and to
raw HINCRBY. Keys are written under the prefix "bench:": use a server you can
write to. Every request loop stops by itself after --duration.
`

// runBench is the bench command: it parses its flags, connects and measures.
func runBench(g *globals, args []string, out io.Writer) error {
	cfg, err := parseBench(args)
	if err != nil {
		return err
	}
	if g.window <= 0 || g.bucket <= 0 {
		return usagef("--window and --bucket must be positive")
	}
	client, err := connect(g)
	if err != nil {
		return err
	}
	defer client.Close()
	return bench(context.Background(), client, g, cfg, out)
}

// parseBench reads bench's own flags.
func parseBench(args []string) (benchConfig, error) {
	cfg := benchConfig{keys: 10000, buckets: []int{10, 60}, goroutines: 64, duration: 3 * time.Second, ops: benchOps,
		batchOps: store.DefaultBatchOps, batchCalls: store.DefaultBatchCalls}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.keys, "keys", cfg.keys, "")
	fs.IntVar(&cfg.goroutines, "goroutines", cfg.goroutines, "")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "")
	fs.IntVar(&cfg.batchOps, "batch-ops", cfg.batchOps, "")
	fs.IntVar(&cfg.batchCalls, "batch-calls", cfg.batchCalls, "")
	buckets := fs.String("buckets", "10,60", "")
	ops := fs.String("ops", strings.Join(benchOps, ","), "")
	if err := fs.Parse(args); err != nil {
		return cfg, usagef("bench: %v\n%s", err, benchUsage)
	}
	if fs.NArg() != 0 {
		return cfg, usagef("bench takes no arguments\n%s", benchUsage)
	}
	if cfg.keys < 100 || cfg.keys > 1000000 {
		return cfg, usagef("bench: --keys %d: want 100 to 1,000,000", cfg.keys)
	}
	if cfg.goroutines < 1 || cfg.goroutines > 4096 {
		return cfg, usagef("bench: --goroutines %d: want 1 to 4096", cfg.goroutines)
	}
	if cfg.batchOps < 1 || cfg.batchOps > 10000 || cfg.batchCalls < 1 || cfg.batchCalls > 1024 {
		return cfg, usagef("bench: --batch-ops %d, --batch-calls %d: want 1 to 10,000 and 1 to 1,024", cfg.batchOps, cfg.batchCalls)
	}
	if cfg.duration < 100*time.Millisecond || cfg.duration > 10*time.Minute {
		return cfg, usagef("bench: --duration %v: want 100ms to 10m", cfg.duration)
	}
	cfg.buckets = nil
	for _, b := range strings.Split(*buckets, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil || n < 1 || n > 600 {
			return cfg, usagef("bench: --buckets %q: want numbers from 1 to 600", *buckets)
		}
		cfg.buckets = append(cfg.buckets, n)
	}
	cfg.ops = nil
	for _, o := range strings.Split(*ops, ",") {
		o = strings.TrimSpace(o)
		if !slices.Contains(benchOps, o) {
			return cfg, usagef("bench: unknown op %q (want %s)", o, strings.Join(benchOps, ","))
		}
		cfg.ops = append(cfg.ops, o)
	}
	return cfg, nil
}

type benchResult struct {
	Op         string  `json:"op"`
	Buckets    int     `json:"buckets"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	P50Us      float64 `json:"p50_us"`
	P99Us      float64 `json:"p99_us"`
	VsNaive    float64 `json:"vs_naive,omitempty"`
	VsRawWrite float64 `json:"vs_raw_hincrby,omitempty"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

func bench(ctx context.Context, client rueidis.Client, g *globals, cfg benchConfig, out io.Writer) error {
	for _, nb := range cfg.buckets {
		w := store.Window{Length: time.Duration(nb) * time.Second, Bucket: time.Second}
		prefix := fmt.Sprintf("bench:%d:", nb)
		st, err := store.New(ctx, client, w, store.WithPrefix(prefix+"ws:"), store.WithBackend(store.Backend(g.backend)),
			store.WithBatching(cfg.batchOps, cfg.batchCalls))
		if err != nil {
			return err
		}
		log, err := limit.NewLog(client, "log", prefix+"zset:", 100, w.Length)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "== %d buckets of 1s, %d keys, %d goroutines, %v per op, backend %s (field TTL %v)\n",
			nb, cfg.keys, cfg.goroutines, cfg.duration, st.Detection().Backend, st.Detection().FieldTTL)
		if err := benchFill(ctx, client, st, prefix, nb, cfg.keys); err != nil {
			return err
		}
		keyName := func(i int) string { return strconv.Itoa(i) }
		sum100 := make([]string, 100)
		for i := range sum100 {
			sum100[i] = keyName(i * 97 % cfg.keys)
		}
		ops := map[string]func(ctx context.Context, k string) error{
			"add":      func(ctx context.Context, k string) error { _, err := st.Add(ctx, k, 1); return err },
			"addnosum": func(ctx context.Context, k string) error { return st.AddNoSum(ctx, k, 1) },
			"sum":      func(ctx context.Context, k string) error { _, err := st.Sum(ctx, k); return err },
			"sum100":   func(ctx context.Context, _ string) error { _, err := st.SumMany(ctx, sum100); return err },
			"allow":    func(ctx context.Context, k string) error { _, err := st.Allow(ctx, k, 1<<40, 1); return err },
			"naive": func(ctx context.Context, k string) error {
				return baseline.Naive.Exec(ctx, client, []string{prefix + "naive:" + k}, baseline.NaiveArgs(time.Now(), nb)).Error()
			},
			"zsetlog": func(ctx context.Context, k string) error { _, err := log.Allow(ctx, k, 1); return err },
			"rawhincrby": func(ctx context.Context, k string) error {
				return client.Do(ctx, client.B().Hincrby().Key(prefix+"raw:"+k).Field("1").Increment(1).Build()).Error()
			},
			"rawhgetall": func(ctx context.Context, k string) error {
				return client.Do(ctx, client.B().Hgetall().Key(prefix+"naive:"+k).Build()).Error()
			},
		}
		var results []benchResult
		for _, name := range cfg.ops {
			r := benchRun(ctx, cfg, ops[name])
			r.Op, r.Buckets = name, nb
			results = append(results, r)
		}
		var naive, raw float64
		for _, r := range results {
			switch r.Op {
			case "naive":
				naive = r.OpsPerSec
			case "rawhincrby":
				raw = r.OpsPerSec
			}
		}
		if !g.json {
			fmt.Fprintf(out, "%-11s %12s %10s %10s %10s %14s %7s\n", "op", "ops/s", "p50 µs", "p99 µs", "vs naive", "vs raw HINCRBY", "errors")
		}
		for i := range results {
			r := &results[i]
			if naive > 0 {
				r.VsNaive = r.OpsPerSec / naive
			}
			if raw > 0 {
				r.VsRawWrite = r.OpsPerSec / raw
			}
			if g.json {
				b, _ := json.Marshal(r)
				fmt.Fprintf(out, "%s\n", b)
				continue
			}
			fmt.Fprintf(out, "%-11s %12.0f %10.1f %10.1f %9.2fx %13.2fx %7d\n", r.Op, r.OpsPerSec, r.P50Us, r.P99Us, r.VsNaive, r.VsRawWrite, r.Errors)
			if r.FirstError != "" {
				fmt.Fprintf(out, "            first error: %s\n", r.FirstError)
			}
		}
	}
	return nil
}

// benchFill gives every counter (and every naive counter) a full window, oldest
// bucket first.
func benchFill(ctx context.Context, c rueidis.Client, st *store.Store, prefix string, nb, keys int) error {
	now := time.Now()
	var failed atomic.Value
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(k int) {
			defer func() { <-sem; wg.Done() }()
			key := strconv.Itoa(k)
			for i := nb - 1; i >= 0; i-- {
				if _, err := st.AddAt(ctx, now.Add(-time.Duration(i)*time.Second), key, 1); err != nil {
					failed.Store(err)
					return
				}
			}
			if err := c.Do(ctx, baseline.NaiveFill(c, prefix+"naive:"+key, nb, now)).Error(); err != nil {
				failed.Store(err)
			}
		}(k)
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return fmt.Errorf("bench: fill: %w", err)
	}
	return nil
}

// benchRun runs op from cfg.goroutines goroutines for cfg.duration.
func benchRun(ctx context.Context, cfg benchConfig, op func(context.Context, string) error) benchResult {
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var count, errs atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, cfg.goroutines)
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < cfg.goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				t := time.Now()
				err := op(ctx, strconv.Itoa(r.IntN(cfg.keys)))
				d := time.Since(t)
				if err != nil {
					// A batch shares its callers' deadline: its timer may fire
					// a moment before ctx's own at the end of the run.
					if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && errs.Add(1) == 1 {
						firstErr.Store(err)
					}
					continue
				}
				count.Add(1)
				if len(lat[g]) < 200000 {
					lat[g] = append(lat[g], d)
				}
			}
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1e3
	}
	r := benchResult{OpsPerSec: float64(count.Load()) / elapsed.Seconds(), P50Us: pct(0.50), P99Us: pct(0.99), Errors: errs.Load()}
	if err, ok := firstErr.Load().(error); ok {
		r.FirstError = err.Error()
	}
	return r
}
