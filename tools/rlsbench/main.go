// Command rlsbench measures windowstored and envoyproxy/ratelimit side by
// side: the same config, the same load of Envoy rate-limit calls (RLS v3
// gRPC), against the same Redis server, in alternating phases. For each
// service it reports decisions per second and the Redis server's CPU time per
// decision (INFO cpu around each phase), as medians of --runs runs with
// their range.
//
// It starts both services itself, from binaries you build: windowstored from
// this repository (go build ./cmd/windowstored), and envoyproxy/ratelimit
// from its public source, which this repository neither holds nor builds:
//
//	git clone https://github.com/envoyproxy/ratelimit && cd ratelimit
//	go build -o /tmp/envoy-ratelimit ./src/service_cmd
//
// scripts/rls-bench.sh starts the server and passes the binaries; see
// README.md ("windowstored beside envoyproxy/ratelimit").
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/figures/render"
	"github.com/windowstore/windowstore/tools/internal/rlsrun"
	"github.com/windowstore/windowstore/tools/internal/serverstat"
)

// benchConfig is the one config both services load: a per-user and a
// per-IP limit, each request carrying both descriptors (envoyproxy/ratelimit's
// format; windowstored reads it as it is).
const benchConfig = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: ip
    rate_limit:
      unit: minute
      requests_per_unit: 1000
`

type config struct {
	redis        string
	windowstored string
	envoy        string
	runs         int
	duration     time.Duration
	warmup       time.Duration
	callers      int
	users, ips   int
	asJSON       bool
	extra        string // windowstored's own rate_limit fields
}

// result is one service's figures over the runs.
type result = render.RLSResult

type phase struct {
	perSec, cpuUs, admitted float64
	errs                    int64
	firstErr                string
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	var c config
	fs := flag.NewFlagSet("rlsbench", flag.ContinueOnError)
	fs.StringVar(&c.redis, "redis", "127.0.0.1:6379", "the Redis server both services use, `HOST:PORT`")
	fs.StringVar(&c.windowstored, "windowstored", "", "windowstored's binary, a `FILE` (go build ./cmd/windowstored)")
	fs.StringVar(&c.envoy, "envoy", os.Getenv("ENVOY_RATELIMIT_BIN"), "envoyproxy/ratelimit's binary, a `FILE` you built (default $ENVOY_RATELIMIT_BIN)")
	fs.IntVar(&c.runs, "runs", 3, "runs of each service, alternating")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "the measured phase of a run")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "the load before each measured phase")
	fs.IntVar(&c.callers, "callers", 32, "concurrent callers on one gRPC connection")
	fs.IntVar(&c.users, "users", 10000, "distinct user values")
	fs.IntVar(&c.ips, "ips", 1000, "distinct ip values")
	fs.BoolVar(&c.asJSON, "json", false, "print one JSON object per service")
	fs.StringVar(&c.extra, "windowstored-rule", "", "windowstored's own rate_limit `FIELDS`, added to both limits: \"algorithm: fixed\", \"bucket: 6s\" (default: a sliding window of 60 buckets)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.windowstored == "" || c.envoy == "" {
		return errors.New("--windowstored and --envoy (or $ENVOY_RATELIMIT_BIN) are required")
	}
	if c.runs < 1 || c.callers < 1 || c.users < 1 || c.ips < 1 || c.duration <= 0 {
		return errors.New("--runs, --callers, --users, --ips and --duration must be positive")
	}
	ctx := context.Background()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{c.redis}, DisableCache: true})
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer client.Close()
	dir, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	services := []string{"envoyproxy/ratelimit", "windowstored"}
	phases := map[string][]phase{}
	for r := 0; r < c.runs; r++ {
		for i := range services {
			name := services[(i+r)%2] // alternate which goes first
			if err := client.Do(ctx, client.B().Flushall().Build()).Error(); err != nil {
				return fmt.Errorf("redis: %w", err)
			}
			p, err := measure(ctx, c, client, dir, name)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			fmt.Fprintf(os.Stderr, "rlsbench: run %d %-20s %8.0f decisions/s %6.2f µs server CPU per decision, %.0f%% admitted, %d errors\n",
				r+1, name, p.perSec, p.cpuUs, 100*p.admitted, p.errs)
			if p.firstErr != "" {
				fmt.Fprintf(os.Stderr, "rlsbench:   the first error: %s\n", p.firstErr)
			}
			phases[name] = append(phases[name], p)
		}
	}
	var results []result
	for _, name := range services {
		results = append(results, summarize(name, phases[name]))
	}
	return report(out, c, results)
}

func summarize(name string, ps []phase) result {
	r := result{Service: name}
	get := func(f func(phase) float64) []float64 {
		v := make([]float64, len(ps))
		for i, p := range ps {
			v[i] = f(p)
		}
		return v
	}
	r.Decisions, r.DecisionsMin, r.DecisionsMax = render.Median(get(func(p phase) float64 { return p.perSec }))
	r.CPUUs, r.CPUUsMin, r.CPUUsMax = render.Median(get(func(p phase) float64 { return p.cpuUs }))
	r.Admitted, _, _ = render.Median(get(func(p phase) float64 { return p.admitted }))
	for _, p := range ps {
		r.Errors += p.errs
		if r.FirstError == "" {
			r.FirstError = p.firstErr
		}
	}
	return r
}

func report(w io.Writer, c config, rs []result) error {
	if c.asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	base := rs[0]
	fmt.Fprintf(w, "| service | decisions/s | Redis CPU per decision | vs envoyproxy/ratelimit (CPU) | admitted |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %.0f (%.0f-%.0f) | %.2f µs (%.2f-%.2f) | %.2fx | %.0f%% |\n", r.Service,
			r.Decisions, r.DecisionsMin, r.DecisionsMax, r.CPUUs, r.CPUUsMin, r.CPUUsMax, r.CPUUs/base.CPUUs, 100*r.Admitted)
	}
	for _, r := range rs {
		if r.Errors > 0 {
			fmt.Fprintf(w, "\n%s: %d errors, the first: %s\n", r.Service, r.Errors, r.FirstError)
		}
	}
	return nil
}

// measure starts one service, loads it for the warm-up and the measured
// phase, and stops it.
func measure(ctx context.Context, c config, client rueidis.Client, dir, name string) (phase, error) {
	var svc *rlsrun.Service
	var err error
	switch name {
	case "windowstored":
		cfg := benchConfig
		if c.extra != "" {
			cfg = strings.ReplaceAll(cfg, "      unit: minute\n", "      unit: minute\n      "+c.extra+"\n")
		}
		svc, err = rlsrun.Windowstored(c.windowstored, c.redis, dir, cfg)
	default:
		svc, err = rlsrun.Envoy(c.envoy, c.redis, dir, benchConfig)
	}
	if err != nil {
		return phase{}, err
	}
	defer svc.Stop()
	rl := svc.RL
	if err := ready(ctx, rl); err != nil {
		return phase{}, fmt.Errorf("%s not ready: %w", name, err)
	}
	load(ctx, c, rl, c.warmup)
	cpu0 := serverstat.CPU(ctx, client)
	start := time.Now()
	n, ok, errs, first := load(ctx, c, rl, c.duration)
	took := time.Since(start)
	cpu1 := serverstat.CPU(ctx, client)
	if n == 0 {
		return phase{}, fmt.Errorf("no decision in %v: %s", c.duration, first)
	}
	return phase{perSec: float64(n) / took.Seconds(), cpuUs: (cpu1 - cpu0) / float64(n),
		admitted: float64(ok) / float64(n), errs: errs, firstErr: first}, nil
}

// ready waits for the service's first decision, up to 30 s.
func ready(ctx context.Context, rl rlspb.RateLimitServiceClient) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := rl.ShouldRateLimit(cctx, request(0, 0))
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func request(user, ip int) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(user)}}},
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0." + strconv.Itoa(ip/256) + "." + strconv.Itoa(ip%256)}}},
	}}
}

// load calls from c.callers goroutines for d, then lets the calls in flight
// finish: decisions made, admitted, errors and the first error.
func load(ctx context.Context, c config, rl rlspb.RateLimitServiceClient, d time.Duration) (n, ok, errs int64, first string) {
	var stop atomic.Bool
	time.AfterFunc(d, func() { stop.Store(true) })
	var nA, okA, errA atomic.Int64
	var firstA atomic.Value
	var wg sync.WaitGroup
	for g := 0; g < c.callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for !stop.Load() {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := rl.ShouldRateLimit(cctx, request(rnd.IntN(c.users), rnd.IntN(c.ips)))
				cancel()
				switch {
				case err != nil:
					errA.Add(1)
					firstA.CompareAndSwap(nil, err.Error())
				default:
					nA.Add(1)
					if resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
						okA.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	first, _ = firstA.Load().(string)
	return nA.Load(), okA.Load(), errA.Load(), first
}
