package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	redis_rate "github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/baseline"
	"github.com/windowstore/windowstore/internal/figures/render"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tools/internal/serverstat"
	"github.com/windowstore/windowstore/tools/internal/workload"
)

// benchConfig is what bench measures.
type benchConfig struct {
	keys       int
	buckets    []int
	goroutines int
	duration   time.Duration
	runs       int
	pairs      int // the targets' pairs (0: as many as runs)
	ops        []string
	batchOps   int
	batchCalls int
	functions  bool
	general    bool // the event pipeline alone (backend.Trace)
}

// The operations bench knows, in the order it runs them: the table's.
var benchOps = render.BenchOps

// benchDetails is the body of --help; the flags follow it (benchFlags).
const benchDetails = `Measures every operation with --goroutines goroutines on one client, over
--keys keys whose windows are full, with buckets of 1 s, and reports for each:

  server µs/op   the server's CPU time per operation: the growth of INFO cpu's
                 used_cpu_sys and used_cpu_user (of the main thread, where the
                 server reports it) over the run, divided by the operations:
                 what decides how many counters one server core can serve
  ops/s, p50, p99  throughput and latency seen by this client

Each operation runs --runs times, in rounds, and the figures are the medians,
with the range of the server time. Ratios compare medians of one invocation, on
one server: the server time with the naive script, the ZSET log, redis_rate and
raw HINCRBY; the throughput with the naive script and the ZSET log. At 10
buckets, the design's targets (docs/benchmarks.md) whose two operations were
measured follow: each ratio of server times measured again in --pairs
back-to-back pairs of runs of half --duration (seconds apart, the order
alternating, each run after a warm-up of a quarter of --duration) at one
pace (the slower operation over fewer keys, in proportion to the two
throughputs, so that both see as many operations per key and second), and
taken round by round from the table's runs; each the median, with its range.
The operations:

  add         Store.Add                  addnosum  Store.Record with NoSum
  addid       Store.Record with an id    sum       Store.Sum
  sum100      Store.SumMany of 100 keys (per key: server µs/op is per call)
  allow       Store.Allow                allow3    store.AllowAll, 3 policies
  refuse      Store.Allow refused (a limit of 1 on a full window): nothing is
              written; the retry and reset read the counter whole
  refuseat    Store.Allow refused at its limit: a window of 1-minute buckets,
              each holding 1 and the newest 2, and a limit of one bucket each:
              a key kept one over its limit, as a hammered key is; the retry
              comes when the second-oldest bucket leaves
  windows     limit.NewWindows of allow's window: its running total and marks
  windows3    limit.NewWindows of allow3's three windows, on one key
  refuse3     allow3 refused by its third policy (a limit of 1 on a full window)
  refuse3at   allow3 refused by its third policy, refuseat's (the first two admit)
  allow3x     store.AllowAll, 3 policies on 3 keys of 3 slots (linked), admitted
  refuse3x    the same, refused by the third key (a limit of 0): nothing is
              written (limits alone across slots are decided before any write)
  attack      a sliding-window limiter (limit.NewSlidingWindow, limit 1 per
              allow's window) under attack: 9 calls in 10 on 100 keys held at
              the limit (refused; its refusal cache answers most), 1 in 10 on
              a new key (admitted)
  record6     features.Set.Record of a 6-feature event (2 entities)
  record6id   the same with an event id (each entity keeps it: one more key each)
  record8     the same, with a max (of the amount) and a last seen besides
  record6x    record6 with a limit on the IP too: the two entities' batches are
              linked (all or nothing), admitted
  observe     Store.RecordStat of a Max
  distinct    Store.RecordStat of StatDistinct, one member
  distincthot the same on 100 keys, hundreds of adds per key and bucket: the
              four-command path (a new bucket's and the union's rebuilds are rare)
  lease       limit.Concurrency: Acquire, then Release (two script calls)
  naive       the textbook hash window script (HINCRBY, EXPIRE, HGETALL, sum, HDEL)
  zsetlog     the exact sliding log on a ZSET (limit.NewLog)
  gcra        limit.NewGCRA: GCRA, one script on a string per key
  redisrate   go-redis/redis_rate's GCRA (AllowN), through go-redis
  rawhincrby  raw HINCRBY, auto-pipelined: the floor of server work for a write
  rawhgetall  raw HGETALL of a full counter: the floor for a read

Every limit is high enough that every call is admitted (the path that writes).
--batch-ops and --batch-calls set the store's write batching (store.WithBatching;
--batch-ops 1 sends every write alone); --functions=false runs the store's
scripts with EVALSHA instead of as functions. Keys are written under the prefix
"bench:": use a server of your own. Run the server on a core of its own for
steadier figures: taskset -c 1 redis-server, or docker run --cpuset-cpus 1.`

// benchJSON is the shape of a --json line.
const benchJSON = `{"op":"add","buckets":N,"backend":"…","field_ttl":bool,"ops_per_sec":N,"p50_us":N,"p99_us":N,"vs_naive":N,"vs_raw_hincrby":N,"errors":N,"first_error":"…"} per op and window`

// benchFlags adds bench's own flags to fs; check checks them once parsed,
// with the --buckets and --ops lists returned here.
func benchFlags(fs *flag.FlagSet) (cfg *benchConfig, buckets, ops *string) {
	cfg = &benchConfig{keys: 10000, goroutines: 64, duration: 3 * time.Second, runs: 3,
		batchOps: 64, batchCalls: 4, functions: true} // the store's batching defaults (store.WithBatching)
	fs.BoolVar(&cfg.functions, "functions", cfg.functions, "run the store's scripts as Redis Functions; false: EVALSHA")
	fs.BoolVar(&cfg.general, "general", false, "the event pipeline alone, never a backend's fast path (to measure the fast path)")
	fs.IntVar(&cfg.keys, "keys", cfg.keys, "number of counters, `N` from 100 to 1,000,000")
	fs.IntVar(&cfg.goroutines, "goroutines", cfg.goroutines, "concurrent callers, `N` from 1 to 4096")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "how long each operation runs, a `DURATION` from 100ms to 10m")
	fs.IntVar(&cfg.runs, "runs", cfg.runs, "how many times each operation runs, `N` from 1 to 25; the figures are medians")
	fs.IntVar(&cfg.pairs, "pairs", 0, "how many back-to-back pairs measure each target, `N` from 1 to 25 (default: --runs)")
	fs.IntVar(&cfg.batchOps, "batch-ops", cfg.batchOps, "the store's writes per script call, `N` from 1 to 10,000")
	fs.IntVar(&cfg.batchCalls, "batch-calls", cfg.batchCalls, "the store's script calls in flight, `N` from 1 to 1,024")
	buckets = fs.String("buckets", "10,60", "the windows to measure, a `LIST` of bucket counts from 1 to 1440")
	ops = fs.String("ops", strings.Join(benchOps, ","), "the operations to measure, a `LIST`")
	return cfg, buckets, ops
}

// check checks bench's flags and sets the bucket counts and operations.
func (cfg *benchConfig) check(buckets, ops string) error {
	switch {
	case cfg.keys < 100 || cfg.keys > 1000000:
		return usagef("--keys %d: want 100 to 1,000,000", cfg.keys)
	case cfg.goroutines < 1 || cfg.goroutines > 4096:
		return usagef("--goroutines %d: want 1 to 4096", cfg.goroutines)
	case cfg.batchOps < 1 || cfg.batchOps > 10000 || cfg.batchCalls < 1 || cfg.batchCalls > 1024:
		return usagef("--batch-ops %d, --batch-calls %d: want 1 to 10,000 and 1 to 1,024", cfg.batchOps, cfg.batchCalls)
	case cfg.duration < 100*time.Millisecond || cfg.duration > 10*time.Minute:
		return usagef("--duration %v: want 100ms to 10m", cfg.duration)
	case cfg.runs < 1 || cfg.runs > 25:
		return usagef("--runs %d: want 1 to 25", cfg.runs)
	case cfg.pairs < 0 || cfg.pairs > 25:
		return usagef("--pairs %d: want 1 to 25", cfg.pairs)
	}
	cfg.buckets = nil
	for _, b := range strings.Split(buckets, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil || n < 1 || n > 1440 {
			return usagef("--buckets %q: want numbers from 1 to 1440", buckets)
		}
		cfg.buckets = append(cfg.buckets, n)
	}
	cfg.ops = nil
	for _, o := range strings.Split(ops, ",") {
		o = strings.TrimSpace(o)
		if !slices.Contains(benchOps, o) {
			return usagef("unknown op %q (want %s)", o, strings.Join(benchOps, ","))
		}
		cfg.ops = append(cfg.ops, o)
	}
	return nil
}

// benchResult is one operation's figures over its runs.
type benchResult struct {
	Op           string  `json:"op"`
	Buckets      int     `json:"buckets"`
	Backend      string  `json:"backend"`
	FieldTTL     bool    `json:"field_ttl"`
	Runs         int     `json:"runs"`
	ServerUs     float64 `json:"server_us_per_op"`
	ServerUsMin  float64 `json:"server_us_min"`
	ServerUsMax  float64 `json:"server_us_max"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	P50Us        float64 `json:"p50_us"`
	P99Us        float64 `json:"p99_us"`
	CPUVsNaive   float64 `json:"cpu_vs_naive,omitempty"`
	CPUVsZsetLog float64 `json:"cpu_vs_zsetlog,omitempty"`
	CPUVsRate    float64 `json:"cpu_vs_redisrate,omitempty"`
	CPUVsRaw     float64 `json:"cpu_vs_raw_hincrby,omitempty"`
	VsNaive      float64 `json:"vs_naive,omitempty"`
	VsZsetLog    float64 `json:"vs_zsetlog,omitempty"`
	// CPUVsAddBase is ServerUs over add's at BaseBuckets, the first bucket
	// count of the invocation, over as many keys: how an operation's cost
	// grows with the window's length, both sides measured in one run.
	CPUVsAddBase float64 `json:"cpu_vs_add_base,omitempty"`
	// CPUVsAddBaseMin and Max are the range of that ratio taken round by
	// round (render.RoundRatios); CPUVsAddBase is the ratio of the medians.
	CPUVsAddBaseMin float64 `json:"cpu_vs_add_base_min,omitempty"`
	CPUVsAddBaseMax float64 `json:"cpu_vs_add_base_max,omitempty"`
	BaseBuckets     int     `json:"base_buckets,omitempty"`
	// ServerUsRuns has each round's server time, in the order of the rounds:
	// the targets' ratios are taken round by round (render.Targets).
	ServerUsRuns []float64 `json:"server_us_runs,omitempty"`
	Errors       int64     `json:"errors"`
	FirstError   string    `json:"first_error,omitempty"`

	runs []benchRunResult
}

// benchRunResult is one run of one operation.
type benchRunResult struct {
	ops       int64
	opsPerSec float64
	p50, p99  float64
	serverUs  float64 // -1: the server does not say
	errs      int64
	firstErr  string
}

// benchOp is one operation: do runs it once for a key.
type benchOp func(ctx context.Context, key string) error

func bench(ctx context.Context, client rueidis.Client, opt rueidis.ClientOption, backend string, cfg benchConfig, p *printer) error {
	gr := goredisClient(opt)
	defer gr.Close()
	var base *benchResult // add at the first bucket count
	baseKeys := 0
	for _, nb := range cfg.buckets {
		keys := cfg.keys
		if nb > 600 && keys > 1000 {
			keys = 1000 // 1,440 buckets of 10,000 counters would take minutes to fill
		}
		ops, st, err := benchSetupOps(ctx, client, gr, backend, cfg, nb, keys)
		if err != nil {
			return err
		}
		if !p.json {
			fmt.Fprintf(p.w, "== %d buckets of 1s, %d keys, %d goroutines, %v per op, %d runs, backend %s (field TTL %v)\n",
				nb, keys, cfg.goroutines, cfg.duration, cfg.runs, st.Detection().Backend, st.Detection().FieldTTL)
		}
		results := make([]*benchResult, len(cfg.ops))
		for i, name := range cfg.ops {
			results[i] = &benchResult{Op: name, Buckets: nb, Backend: st.Detection().Backend, FieldTTL: st.Detection().FieldTTL, Runs: cfg.runs}
		}
		for run := 0; run < cfg.runs; run++ {
			for i, name := range cfg.ops {
				results[i].runs = append(results[i].runs, benchRun(ctx, client, cfg, keys, ops[name]))
			}
		}
		for _, r := range results {
			r.summarize()
		}
		byOp := map[string]*benchResult{}
		for _, r := range results {
			byOp[r.Op] = r
		}
		ratio := func(a, b float64) float64 {
			if a <= 0 || b <= 0 {
				return 0
			}
			return a / b
		}
		for _, r := range results {
			if n := byOp["naive"]; n != nil {
				r.CPUVsNaive, r.VsNaive = ratio(r.ServerUs, n.ServerUs), ratio(r.OpsPerSec, n.OpsPerSec)
			}
			if z := byOp["zsetlog"]; z != nil {
				r.CPUVsZsetLog, r.VsZsetLog = ratio(r.ServerUs, z.ServerUs), ratio(r.OpsPerSec, z.OpsPerSec)
			}
			if rr := byOp["redisrate"]; rr != nil {
				r.CPUVsRate = ratio(r.ServerUs, rr.ServerUs)
			}
			if h := byOp["rawhincrby"]; h != nil {
				r.CPUVsRaw = ratio(r.ServerUs, h.ServerUs)
			}
			if base != nil && keys == baseKeys {
				r.CPUVsAddBase, r.BaseBuckets = ratio(r.ServerUs, base.ServerUs), base.Buckets
				_, r.CPUVsAddBaseMin, r.CPUVsAddBaseMax, _ = render.RoundRatios(r.ServerUsRuns, base.ServerUsRuns)
			}
		}
		if base == nil && byOp["add"] != nil {
			base, baseKeys = byOp["add"], keys
		}
		if err := printBench(p, results); err != nil {
			return err
		}
		if nb == 10 {
			pairs := pairTargets(cfg, keys, byOp, func(c benchConfig, k int, name string) benchRunResult {
				return benchRun(ctx, client, c, k, ops[name])
			})
			if err := printTargets(p, byOp, pairs); err != nil {
				return err
			}
		}
	}
	return nil
}

// printBench prints one window's results: a table, or one JSON object each.
func printBench(p *printer, results []*benchResult) error {
	if p.json {
		for _, r := range results {
			if err := p.jsonLine(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintf(p.w, "%-10s %24s %9s %9s %9s %9s %11s %9s %9s %9s %9s %7s\n", "op", "server µs/op (range)", "vs naive",
		"vs zset", "vs rate", "vs HINCR", "ops/s", "vs naive", "vs zset", "p50 µs", "p99 µs", "errors")
	x := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", v)
	}
	for _, r := range results {
		cpu := "n/a"
		if r.ServerUs >= 0 {
			cpu = fmt.Sprintf("%.2f (%.2f-%.2f)", r.ServerUs, r.ServerUsMin, r.ServerUsMax)
		}
		fmt.Fprintf(p.w, "%-10s %24s %9s %9s %9s %9s %11.0f %9s %9s %9.1f %9.1f %7d\n", r.Op, cpu, x(r.CPUVsNaive), x(r.CPUVsZsetLog),
			x(r.CPUVsRate), x(r.CPUVsRaw), r.OpsPerSec, x(r.VsNaive), x(r.VsZsetLog), r.P50Us, r.P99Us, r.Errors)
		if r.CPUVsAddBase != 0 {
			fmt.Fprintf(p.w, "           server CPU vs add at %d buckets (same keys, this run): %.2fx\n", r.BaseBuckets, r.CPUVsAddBase)
		}
		if r.FirstError != "" {
			fmt.Fprintf(p.w, "           first error: %s\n", r.FirstError)
		}
	}
	return nil
}

// targetResult is a target's ratio measured in pairs (pairTargets).
type targetResult struct {
	Target  string  `json:"target"` // "op/base"
	Buckets int     `json:"buckets"`
	Ratio   float64 `json:"ratio"` // the median of the pairs' ratios
	Min     float64 `json:"ratio_min"`
	Max     float64 `json:"ratio_max"`
	Pairs   int     `json:"pairs"`
	// OpKeys and BaseKeys are the keys each side ran over (pacedKeys).
	OpKeys   int `json:"op_keys"`
	BaseKeys int `json:"base_keys"`
}

// pacedKeys returns the keys a target's two operations run over in pairs
// so that both run at one pace: as many operations per key and second.
// The faster operation (by the table's throughputs) keeps every key; the
// slower one gets a share of them in proportion to its throughput, and at
// least 100. At one pace, each side starts a bucket (a move, which costs
// about a whole operation more) on the same share of its operations, as
// two operations on one event stream do; over the same keys the slower
// one would see fewer operations per key and start a bucket on more of
// them, so its ratio would grow as the machine slows.
func pacedKeys(keys int, opRate, baseRate float64) (opKeys, baseKeys int) {
	opKeys, baseKeys = keys, keys
	if opRate <= 0 || baseRate <= 0 {
		return
	}
	share := func(r float64) int { return max(100, min(keys, int(float64(keys)*r+0.5))) }
	if opRate < baseRate {
		opKeys = share(opRate / baseRate)
	} else {
		baseKeys = share(baseRate / opRate)
	}
	return
}

// pairTargets measures the targets (render.Targets) whose two operations
// were both measured, in pairs of back-to-back slices of half a run each
// (--pairs pairs, the order of each pair alternating: base then op, op then
// base), at one pace (pacedKeys): each pair's ratio of server times comes
// from two slices seconds apart, where the table's rows of one round can be
// a minute apart on a machine whose speed drifts. Each slice follows a warm-up of the same
// operation (a quarter of a run, not measured): an operation's keys were
// idle while the other ran, and the first write to each after that sweeps
// the buckets that left meanwhile; a slice as short as this one would carry
// that sweep on a tenth of its writes, where a steady stream pays it once per
// bucket. run runs the named operation with cfg over keys keys (benchRun).
func pairTargets(cfg benchConfig, keys int, byOp map[string]*benchResult,
	run func(cfg benchConfig, keys int, name string) benchRunResult) []targetResult {
	half, warm := cfg, cfg
	half.duration = max(cfg.duration/2, 100*time.Millisecond)
	warm.duration = max(cfg.duration/4, 50*time.Millisecond)
	var out []targetResult
	for _, t := range render.Targets {
		if byOp[t.Op] == nil || byOp[t.Base] == nil {
			continue
		}
		opKeys, baseKeys := pacedKeys(keys, byOp[t.Op].OpsPerSec, byOp[t.Base].OpsPerSec)
		keysOf := map[string]int{t.Op: opKeys, t.Base: baseKeys}
		var opUs, baseUs []float64
		pairs := cfg.pairs
		if pairs == 0 {
			pairs = cfg.runs
		}
		for i := 0; i < pairs; i++ {
			first, second := t.Base, t.Op
			if i%2 == 1 {
				first, second = second, first
			}
			slice := func(name string) benchRunResult {
				run(warm, keysOf[name], name)
				return run(half, keysOf[name], name)
			}
			a := slice(first)
			b := slice(second)
			if i%2 == 1 {
				a, b = b, a
			}
			if a.errs > 0 || b.errs > 0 {
				continue // (the table's rows report errors)
			}
			baseUs, opUs = append(baseUs, a.serverUs), append(opUs, b.serverUs)
		}
		med, lo, hi, n := render.RoundRatios(opUs, baseUs)
		if n > 0 {
			out = append(out, targetResult{Target: t.Op + "/" + t.Base, Buckets: 10, Ratio: med, Min: lo, Max: hi, Pairs: n,
				OpKeys: opKeys, BaseKeys: baseKeys})
		}
	}
	return out
}

// printTargets prints the targets (render.Targets) whose two operations
// were measured: each ratio in pairs (pairTargets), and taken round by round
// from the table's runs; with --json, the pairs' lines.
func printTargets(p *printer, byOp map[string]*benchResult, pairs []targetResult) error {
	if p.json {
		for _, r := range pairs {
			if err := p.jsonLine(r); err != nil {
				return err
			}
		}
		return nil
	}
	paired := map[string]targetResult{}
	for _, r := range pairs {
		paired[r.Target] = r
	}
	head := false
	for _, t := range render.Targets {
		op, base := byOp[t.Op], byOp[t.Base]
		if op == nil || base == nil {
			continue
		}
		med, lo, hi, n := render.RoundRatios(op.ServerUsRuns, base.ServerUsRuns)
		if n == 0 {
			continue
		}
		if !head {
			fmt.Fprintln(p.w, "targets, server time as a ratio: median (range) of back-to-back pairs at one pace; of the table's rounds")
			head = true
		}
		pr := "n/m"
		if r, ok := paired[t.Op+"/"+t.Base]; ok {
			pr = fmt.Sprintf("%.2fx (%.2f-%.2f) over %d and %d keys", r.Ratio, r.Min, r.Max, r.OpKeys, r.BaseKeys)
		}
		fmt.Fprintf(p.w, "  %-9s / %-8s pairs %s; rounds %.2fx (%.2f-%.2f); at most %.1fx\n", t.Op, t.Base, pr, med, lo, hi, t.Max)
	}
	return nil
}

// summarize sets the medians and the range from the runs.
func (r *benchResult) summarize() {
	med := func(get func(benchRunResult) float64) float64 {
		v := make([]float64, len(r.runs))
		for i, x := range r.runs {
			v[i] = get(x)
		}
		m, _, _ := render.Median(v)
		return m
	}
	r.ServerUs = med(func(x benchRunResult) float64 { return x.serverUs })
	r.ServerUsMin, r.ServerUsMax = r.runs[0].serverUs, r.runs[0].serverUs
	for _, x := range r.runs {
		r.ServerUsMin, r.ServerUsMax = min(r.ServerUsMin, x.serverUs), max(r.ServerUsMax, x.serverUs)
		r.Errors += x.errs
		if r.FirstError == "" {
			r.FirstError = x.firstErr
		}
	}
	r.ServerUsRuns = make([]float64, len(r.runs))
	for i, x := range r.runs {
		r.ServerUsRuns[i] = x.serverUs
	}
	r.OpsPerSec = med(func(x benchRunResult) float64 { return x.opsPerSec })
	r.P50Us = med(func(x benchRunResult) float64 { return x.p50 })
	r.P99Us = med(func(x benchRunResult) float64 { return x.p99 })
}

// goredisClient is a go-redis client of the same server, for redis_rate.
func goredisClient(opt rueidis.ClientOption) *goredis.Client {
	o := &goredis.Options{Addr: opt.InitAddress[0], Username: opt.Username, Password: opt.Password, DB: opt.SelectDB,
		PoolSize: 128, TLSConfig: opt.TLSConfig}
	return goredis.NewClient(o)
}

// benchSetupOps fills the counters of one window and returns every operation.
func benchSetupOps(ctx context.Context, client rueidis.Client, gr *goredis.Client, backend string, cfg benchConfig, nb, keys int) (map[string]benchOp, *store.Store, error) {
	prefix := fmt.Sprintf("bench:%d:", nb)
	opts := []store.Option{store.WithPrefix(prefix + "ws:"), store.WithBackend(backend),
		store.WithBatching(cfg.batchOps, cfg.batchCalls), hook.WithFunctions(cfg.functions).(store.Option)}
	if cfg.general {
		opts = append(opts, hook.WithTrace("bench", true).(store.Option))
	}
	w := store.Window{Length: time.Duration(nb) * time.Second, Bucket: time.Second}
	// Three policies of nb buckets each: nb s of 1 s, 10 nb s of 10 s, 100 nb s of 100 s.
	var policies []*store.Store
	for _, scale := range []time.Duration{1, 10, 100} {
		s, err := store.New(ctx, client, store.Window{Length: w.Length * scale, Bucket: w.Bucket * scale}, opts...)
		if err != nil {
			return nil, nil, err
		}
		policies = append(policies, s)
	}
	st := policies[0]
	lg, err := limit.NewLog(client, "log", 1<<40, w.Length, limit.WithPrefix(prefix+"zset:"))
	if err != nil {
		return nil, nil, err
	}
	gcra, err := limit.NewGCRA(client, "gcra", 1<<30, w.Length, 1<<30, limit.WithPrefix(prefix+"gcra:"))
	if err != nil {
		return nil, nil, err
	}
	attacked, err := limit.NewSlidingWindow(st, "attack", 1)
	if err != nil {
		return nil, nil, err
	}
	one := store.Window{Length: w.Length, Bucket: w.Bucket}
	six := workload.Record6(one)
	set, err := features.New(ctx, client, six, append(opts, store.WithPrefix(prefix+"fx:"))...)
	if err != nil {
		return nil, nil, err
	}
	// record8: record6's features, and a max and a last seen.
	set8, err := features.New(ctx, client, append(append([]features.Feature(nil), six...),
		features.Feature{Name: "ip_max_amount", Entity: "ip", Kind: features.Max, Windows: []store.Window{one}},
		features.Feature{Name: "user_last_seen", Entity: "user", Kind: features.Last, Windows: []store.Window{one}},
	), append(opts, store.WithPrefix(prefix+"fx8:"))...)
	if err != nil {
		return nil, nil, err
	}
	// record6x: record6's features, and a limit on the IP: both entities
	// limit, so their batches are linked.
	setx, err := features.New(ctx, client, append(append([]features.Feature(nil), six...),
		features.Feature{Name: "ip_limit", Entity: "ip", Kind: features.Limit, Windows: []store.Window{one}, Limits: []int64{1 << 40}},
	), append(opts, store.WithPrefix(prefix+"fxx:"))...)
	if err != nil {
		return nil, nil, err
	}
	// windows and windows3: the windows limiter (limit.NewWindows) of allow's
	// window alone, and of allow3's three.
	var rules []limit.WindowLimit
	for i, p := range policies {
		rules = append(rules, limit.WindowLimit{Name: "w" + strconv.Itoa(i), Limit: 1 << 40, Window: p.Window()})
	}
	win1, err := limit.NewWindows(client, "w1", rules[:1], limit.WithPrefix(prefix+"win:"))
	if err != nil {
		return nil, nil, err
	}
	win3, err := limit.NewWindows(client, "w3", rules, limit.WithPrefix(prefix+"win:"))
	if err != nil {
		return nil, nil, err
	}
	if slices.Contains(cfg.ops, "windows") || slices.Contains(cfg.ops, "windows3") {
		if err := benchFillWindows(ctx, win1, rules[:1], keys); err != nil {
			return nil, nil, err
		}
		if err := benchFillWindows(ctx, win3, rules, keys); err != nil {
			return nil, nil, err
		}
	}
	inflight, err := limit.NewConcurrency(st, "inflight", 1<<40, time.Minute)
	if err != nil {
		return nil, nil, err
	}
	if err := benchFill(ctx, client, policies, prefix, nb, keys); err != nil {
		return nil, nil, err
	}
	// refuseat: nb buckets of a minute, filled only when asked for.
	atLimit, err := store.New(ctx, client, store.Window{Length: time.Duration(nb) * time.Minute, Bucket: time.Minute},
		append(opts, store.WithPrefix(prefix+"ra:"))...)
	if err != nil {
		return nil, nil, err
	}
	if slices.Contains(cfg.ops, "refuseat") || slices.Contains(cfg.ops, "refuse3at") {
		if err := benchFillAtLimit(ctx, atLimit, nb, keys); err != nil {
			return nil, nil, err
		}
	}
	sum100 := make([]string, 100)
	for i := range sum100 {
		sum100[i] = strconv.Itoa(i * 97 % keys)
	}
	var ids, attacks atomic.Int64
	base := rand.Int64()
	rl := redis_rate.NewLimiter(gr)
	rate := redis_rate.Limit{Rate: 1 << 30, Burst: 1 << 30, Period: w.Length}
	return map[string]benchOp{
		"add": func(ctx context.Context, k string) error { _, err := st.Add(ctx, k, 1); return err },
		"addnosum": func(ctx context.Context, k string) error {
			_, err := st.Record(ctx, store.Event{Key: k, Delta: 1, NoSum: true})
			return err
		},
		"addid": func(ctx context.Context, k string) error {
			_, err := st.Record(ctx, store.Event{Key: k, Delta: 1, ID: strconv.FormatInt(base+ids.Add(1), 36)})
			return err
		},
		"sum":    func(ctx context.Context, k string) error { _, err := st.Sum(ctx, k); return err },
		"sum100": func(ctx context.Context, _ string) error { _, err := st.SumMany(ctx, sum100); return err },
		"allow":  func(ctx context.Context, k string) error { _, err := st.Allow(ctx, k, 1<<40, 1); return err },
		"allow3": func(ctx context.Context, k string) error {
			_, err := store.AllowAll(ctx, 1, store.Quota{Store: policies[0], Key: k, Limit: 1 << 40},
				store.Quota{Store: policies[1], Key: k, Limit: 1 << 40}, store.Quota{Store: policies[2], Key: k, Limit: 1 << 40})
			return err
		},
		"windows":  func(ctx context.Context, k string) error { _, err := win1.Allow(ctx, k, 1); return err },
		"windows3": func(ctx context.Context, k string) error { _, err := win3.Allow(ctx, k, 1); return err },
		"refuse": func(ctx context.Context, k string) error {
			// allow3's third window (100 s buckets): the fill leaves it full
			// for the whole bench. (allow's own 10 s window empties where
			// the other operations did not write in the last 10 s: on a slow
			// machine a few of its keys were admitted.)
			d, err := policies[2].Allow(ctx, k, 1, 1)
			if err == nil && d.Allowed {
				err = errors.New("refuse: admitted")
			}
			return err
		},
		"refuseat": func(ctx context.Context, k string) error {
			// (Once two buckets have left, a call is admitted, and the key is
			// one over again.)
			_, err := atLimit.Allow(ctx, k, int64(nb), 1)
			return err
		},
		"refuse3at": func(ctx context.Context, k string) error {
			_, err := store.AllowAll(ctx, 1, store.Quota{Store: policies[0], Key: k, Limit: 1 << 40},
				store.Quota{Store: policies[1], Key: k, Limit: 1 << 40}, store.Quota{Store: atLimit, Key: k, Limit: int64(nb)})
			return err
		},
		"refuse3": func(ctx context.Context, k string) error {
			d, err := store.AllowAll(ctx, 1, store.Quota{Store: policies[0], Key: k, Limit: 1 << 40},
				store.Quota{Store: policies[1], Key: k, Limit: 1 << 40}, store.Quota{Store: policies[2], Key: k, Limit: 1})
			if err == nil && d.Allowed {
				err = errors.New("refuse3: admitted")
			}
			return err
		},
		"allow3x": func(ctx context.Context, k string) error {
			_, err := store.AllowAll(ctx, 1, store.Quota{Store: st, Key: k, Limit: 1 << 40},
				store.Quota{Store: st, Key: "ip" + k, Limit: 1 << 40}, store.Quota{Store: st, Key: "dev" + k, Limit: 1 << 40})
			return err
		},
		"refuse3x": func(ctx context.Context, k string) error {
			d, err := store.AllowAll(ctx, 1, store.Quota{Store: st, Key: k, Limit: 1 << 40},
				store.Quota{Store: st, Key: "ip" + k, Limit: 1 << 40}, store.Quota{Store: st, Key: "dev" + k, Limit: 0})
			if err == nil && d.Allowed {
				err = errors.New("refuse3x: admitted")
			}
			return err
		},
		"attack": func(ctx context.Context, _ string) error {
			n := attacks.Add(1)
			key := "hot:" + strconv.FormatInt(n%100, 10)
			if n%10 == 0 {
				key = "new:" + strconv.FormatInt(base+n, 36)
			}
			_, err := attacked.Allow(ctx, key, 1)
			return err
		},
		"record6": func(ctx context.Context, k string) error {
			_, err := set.Record(ctx, features.Event{Entities: map[string]string{"user": k, "ip": "ip" + k}, Amount: 3})
			return err
		},
		"record6id": func(ctx context.Context, k string) error {
			_, err := set.Record(ctx, features.Event{ID: strconv.FormatInt(base+ids.Add(1), 36),
				Entities: map[string]string{"user": k, "ip": "ip" + k}, Amount: 3})
			return err
		},
		"record6x": func(ctx context.Context, k string) error {
			_, err := setx.Record(ctx, features.Event{Entities: map[string]string{"user": k, "ip": "ip" + k}, Amount: 3})
			return err
		},
		"record8": func(ctx context.Context, k string) error {
			_, err := set8.Record(ctx, features.Event{Entities: map[string]string{"user": k, "ip": "ip" + k}, Amount: rand.Int64N(1000)})
			return err
		},
		"observe": func(ctx context.Context, k string) error {
			_, err := st.RecordStat(ctx, store.StatEvent{Key: k, Stat: store.StatMax, Value: rand.Int64N(1000)})
			return err
		},
		"lease": func(ctx context.Context, k string) error {
			l, err := inflight.Acquire(ctx, k)
			if err != nil {
				return err
			}
			_, err = inflight.Release(ctx, k, l.ID)
			return err
		},
		"distinct": func(ctx context.Context, k string) error {
			_, err := st.RecordStat(ctx, store.StatEvent{Key: k, Stat: store.StatDistinct, Members: []string{strconv.Itoa(rand.IntN(1000))}})
			return err
		},
		"distincthot": func(ctx context.Context, k string) error {
			n, _ := strconv.Atoi(k)
			_, err := st.RecordStat(ctx, store.StatEvent{Key: "hot:" + strconv.Itoa(n%100), Stat: store.StatDistinct, Members: []string{strconv.Itoa(rand.IntN(1000))}})
			return err
		},
		"naive": func(ctx context.Context, k string) error {
			return baseline.Naive.Exec(ctx, client, []string{prefix + "naive:" + k}, baseline.NaiveArgs(time.Now(), nb)).Error()
		},
		"zsetlog": func(ctx context.Context, k string) error { _, err := lg.Allow(ctx, k, 1); return err },
		"gcra":    func(ctx context.Context, k string) error { _, err := gcra.Allow(ctx, k, 1); return err },
		"redisrate": func(ctx context.Context, k string) error {
			_, err := rl.AllowN(ctx, prefix+"gcra:"+k, rate, 1)
			return err
		},
		"rawhincrby": func(ctx context.Context, k string) error {
			return client.Do(ctx, client.B().Hincrby().Key(prefix+"raw:"+k).Field("1").Increment(1).Build()).Error()
		},
		"rawhgetall": func(ctx context.Context, k string) error {
			return client.Do(ctx, client.B().Hgetall().Key(prefix+"naive:"+k).Build()).Error()
		},
	}, st, nil
}

// benchFill fills the counters of every key: nb buckets of 1 in each store,
// and the naive script's hash.
func benchFill(ctx context.Context, c rueidis.Client, stores []*store.Store, prefix string, nb, keys int) error {
	now := time.Now()
	return forKeys(keys, func(key string) error {
		for _, st := range stores {
			b := st.Window().Bucket
			for i := nb - 1; i >= 0; i-- {
				if _, err := st.At(now.Add(-time.Duration(i)*b)).Record(ctx, store.Event{Key: key, Delta: 1, NoSum: true}); err != nil {
					return err
				}
			}
		}
		return c.Do(ctx, baseline.NaiveFill(c, prefix+"naive:"+key, nb, now)).Error()
	})
}

// benchFillWindows fills every key of l as benchFill fills the stores: a
// count in each bucket of each of its rules' windows, oldest first.
func benchFillWindows(ctx context.Context, l limit.Limiter, rules []limit.WindowLimit, keys int) error {
	now := time.Now()
	var at []time.Time
	for _, r := range rules {
		for i := r.Window.Length / r.Window.Bucket; i > 0; i-- {
			at = append(at, now.Add(-(i-1)*r.Window.Bucket))
		}
	}
	slices.SortFunc(at, time.Time.Compare)
	return forKeys(keys, func(key string) error {
		for _, t := range at {
			if _, err := l.AllowAt(ctx, t, key, 1); err != nil {
				return err
			}
		}
		return nil
	})
}

// benchFillAtLimit gives every key of st (a window of nb buckets) 1 in each
// bucket and 2 in the newest: one over a limit of nb.
func benchFillAtLimit(ctx context.Context, st *store.Store, nb, keys int) error {
	now := time.Now()
	b := st.Window().Bucket
	return forKeys(keys, func(key string) error {
		for i := nb - 1; i >= 0; i-- {
			delta := int64(1)
			if i == 0 {
				delta = 2
			}
			if _, err := st.At(now.Add(-time.Duration(i)*b)).Record(ctx, store.Event{Key: key, Delta: delta, NoSum: true}); err != nil {
				return err
			}
		}
		return nil
	})
}

// forKeys runs fill for the keys "0" to keys-1, 256 at a time, and answers
// the first error.
func forKeys(keys int, fill func(key string) error) error {
	var failed atomic.Value
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(key string) {
			defer func() { <-sem; wg.Done() }()
			if err := fill(key); err != nil {
				failed.Store(err)
			}
		}(strconv.Itoa(k))
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		return fmt.Errorf("bench: fill: %w", err)
	}
	return nil
}

// benchRun runs op from cfg.goroutines goroutines for cfg.duration, and reads
// the server's CPU time before and after.
func benchRun(ctx context.Context, client rueidis.Client, cfg benchConfig, keys int, op benchOp) benchRunResult {
	cpu0 := serverstat.CPU(ctx, client)
	rctx, cancel := context.WithTimeout(ctx, cfg.duration)
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
			for rctx.Err() == nil {
				t := time.Now()
				err := op(rctx, strconv.Itoa(r.IntN(keys)))
				d := time.Since(t)
				if err != nil {
					// A batch shares its callers' deadline: its timer may fire
					// a moment before ctx's own at the end of the run.
					if rctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && errs.Add(1) == 1 {
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
	cpu1 := serverstat.CPU(ctx, client)
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
	r := benchRunResult{ops: count.Load(), opsPerSec: float64(count.Load()) / elapsed.Seconds(), p50: pct(0.50), p99: pct(0.99),
		errs: errs.Load(), serverUs: -1}
	if cpu0 >= 0 && cpu1 >= 0 && r.ops > 0 {
		r.serverUs = (cpu1 - cpu0) / float64(r.ops)
	}
	if err, ok := firstErr.Load().(error); ok {
		r.firstErr = err.Error()
	}
	return r
}
