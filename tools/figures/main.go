// Command figures renders the figure tables of README.md and docs/*.md from
// tests/figures.json, between the markers <!-- figures:NAME --> and
// <!-- /figures:NAME --> (docs/benchmarks.md, docs/backends.md,
// docs/ratelimiting.md and docs/counters.md hold them):
//
//	go run ./tools/figures          # rewrite the docs' tables
//	go run ./tools/figures -check   # exit 1 when the docs' tables differ
//	go run ./tools/figures -bench FILE -how TEXT
//	                                    # record the bench's --json lines
//	                                    # (FILE, - for stdin), then rewrite
//	go run ./tools/figures -rls FILE -rls-name NAME -how TEXT
//	                                    # record tools/rlsbench's --json lines
//	                                    # as the README's setting NAME
//
// The figures themselves come from the tests that measure them (package
// figures) and from scripts/bench.sh.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/windowstore/windowstore/internal/figures"
	"github.com/windowstore/windowstore/internal/figures/render"
)

func main() {
	check := flag.Bool("check", false, "only check that the docs' tables are up to date")
	benchFile := flag.String("bench", "", "record the lines of the bench's --json output (tools/bench) from this file (- for stdin) first")
	rlsFile := flag.String("rls", "", "record the lines of tools/rlsbench's --json output from this file (- for stdin) first")
	rlsName := flag.String("rls-name", "", "with -rls: the windowstored setting they measured, one of the README's ("+rlsNames()+")")
	how := flag.String("how", "", "with -bench or -rls: how the figures were measured, for the docs")
	flag.Parse()
	if *benchFile != "" {
		if err := recordBench(*benchFile, *how); err != nil {
			fail(err)
		}
	}
	if *rlsFile != "" {
		if err := recordRLS(*rlsFile, *rlsName, *how); err != nil {
			fail(err)
		}
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		fail(err)
	}
	f, err := figures.Load(figures.Path())
	if err != nil {
		fail(err)
	}
	for _, doc := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		name, _ := filepath.Rel(root, doc)
		b, err := os.ReadFile(doc)
		if err != nil {
			fail(err)
		}
		out, err := render.README(string(b), f)
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		if out == string(b) {
			fmt.Printf("figures: %s is up to date\n", name)
			continue
		}
		if *check {
			fail(fmt.Errorf("%s's figure tables differ from tests/figures.json: run go run ./tools/figures", name))
		}
		if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("figures: %s rewritten\n", name)
	}
}

// benchLine is the part of a bench --json line that is recorded.
type benchLine struct {
	Op           string    `json:"op"`
	Buckets      int       `json:"buckets"`
	Runs         int       `json:"runs"`
	ServerUs     float64   `json:"server_us_per_op"`
	ServerUsMin  float64   `json:"server_us_min"`
	ServerUsMax  float64   `json:"server_us_max"`
	OpsPerSec    float64   `json:"ops_per_sec"`
	CPUVsNaive   float64   `json:"cpu_vs_naive"`
	CPUVsZsetLog float64   `json:"cpu_vs_zsetlog"`
	CPUVsRate    float64   `json:"cpu_vs_redisrate"`
	CPUVsRaw     float64   `json:"cpu_vs_raw_hincrby"`
	VsNaive      float64   `json:"vs_naive"`
	CPUVsAddBase float64   `json:"cpu_vs_add_base"`
	CPUVsAddMin  float64   `json:"cpu_vs_add_base_min"`
	CPUVsAddMax  float64   `json:"cpu_vs_add_base_max"`
	BaseBuckets  int       `json:"base_buckets"`
	ServerUsRuns []float64 `json:"server_us_runs"`
	// A target's line (the bench's targetResult) instead of an operation's.
	Target   string  `json:"target"`
	Ratio    float64 `json:"ratio"`
	RatioMin float64 `json:"ratio_min"`
	RatioMax float64 `json:"ratio_max"`
	Pairs    int     `json:"pairs"`
	OpKeys   int     `json:"op_keys"`
	BaseKeys int     `json:"base_keys"`
	Errors   int64   `json:"errors"`
}

// recordBench merges the benchmark's lines into tests/figures.json, each
// operation's figures under bench/BUCKETS/OP/, replacing those of the
// operations it measured.
func recordBench(path, how string) error {
	in, err := input(path)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := figures.Load(figures.Path())
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var l benchLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return fmt.Errorf("bench line %q: %w", line, err)
		}
		if l.Target != "" {
			// A target's pairs (the bench's targetResult).
			p := fmt.Sprintf("bench/%d/target/%s/", l.Buckets, l.Target)
			f[p+"ratio"] = figures.Figure{Value: l.Ratio, Unit: "x"}
			f[p+"ratio_min"] = figures.Figure{Value: l.RatioMin, Unit: "x"}
			f[p+"ratio_max"] = figures.Figure{Value: l.RatioMax, Unit: "x"}
			f[p+"pairs"] = figures.Figure{Value: float64(l.Pairs)}
			delete(f, p+"op_keys")
			delete(f, p+"base_keys")
			if l.OpKeys > 0 && l.BaseKeys > 0 {
				f[p+"op_keys"] = figures.Figure{Value: float64(l.OpKeys)}
				f[p+"base_keys"] = figures.Figure{Value: float64(l.BaseKeys)}
			}
			n++
			continue
		}
		if l.Op == "" || l.Buckets == 0 {
			continue
		}
		if l.Errors > 0 {
			return fmt.Errorf("bench: %s at %d buckets had %d errors: not recorded", l.Op, l.Buckets, l.Errors)
		}
		p := fmt.Sprintf("bench/%d/%s/", l.Buckets, l.Op)
		for name := range f {
			if strings.HasPrefix(name, p) {
				delete(f, name)
			}
		}
		set := func(k string, v float64, unit string) {
			if v != 0 {
				f[p+k] = figures.Figure{Value: v, Unit: unit}
			}
		}
		set("server_us", l.ServerUs, "µs")
		set("server_us_min", l.ServerUsMin, "µs")
		set("server_us_max", l.ServerUsMax, "µs")
		set("ops_per_sec", l.OpsPerSec, "/s")
		set("cpu_vs_naive", l.CPUVsNaive, "x")
		set("cpu_vs_zsetlog", l.CPUVsZsetLog, "x")
		set("cpu_vs_redisrate", l.CPUVsRate, "x")
		set("cpu_vs_raw_hincrby", l.CPUVsRaw, "x")
		set("vs_naive", l.VsNaive, "x")
		set("cpu_vs_add_base", l.CPUVsAddBase, "x")
		set("cpu_vs_add_base_min", l.CPUVsAddMin, "x")
		set("cpu_vs_add_base_max", l.CPUVsAddMax, "x")
		for i, v := range l.ServerUsRuns {
			set(fmt.Sprintf("server_us_run%d", i+1), v, "µs")
		}
		set("base_buckets", float64(l.BaseBuckets), "")
		set("runs", float64(l.Runs), "")
		n++
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("bench: no result lines in %s", path)
	}
	if how != "" {
		f["bench/how"] = figures.Figure{How: how}
	}
	fmt.Printf("figures: %d benchmark results recorded\n", n)
	return f.Write(figures.Path())
}

func rlsNames() string {
	var names []string
	for _, v := range render.RLSVariants {
		names = append(names, v.Name)
	}
	return strings.Join(names, ", ")
}

// recordRLS replaces the figures of setting name (rls/NAME/) with one
// invocation of tools/rlsbench: both services' medians and ranges, and
// windowstored's CPU per decision against envoyproxy/ratelimit's.
func recordRLS(path, name, how string) error {
	if !strings.Contains(", "+rlsNames()+", ", ", "+name+", ") {
		return fmt.Errorf("-rls-name %q is not one of %s", name, rlsNames())
	}
	if how == "" {
		return fmt.Errorf("-rls needs -how: how the figures were measured")
	}
	in, err := input(path)
	if err != nil {
		return err
	}
	defer in.Close()
	got := map[string]render.RLSResult{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var l render.RLSResult
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return fmt.Errorf("rlsbench line %q: %w", line, err)
		}
		if l.Errors > 0 {
			return fmt.Errorf("rlsbench: %s had %d errors: not recorded", l.Service, l.Errors)
		}
		got[l.Service] = l
	}
	if err := sc.Err(); err != nil {
		return err
	}
	envoy, ok1 := got["envoyproxy/ratelimit"]
	ws, ok2 := got["windowstored"]
	if !ok1 || !ok2 || envoy.CPUUs <= 0 {
		return fmt.Errorf("rlsbench: %s holds no line of envoyproxy/ratelimit and of windowstored", path)
	}
	f, err := figures.Load(figures.Path())
	if err != nil {
		return err
	}
	p := "rls/" + name + "/"
	for k := range f {
		if strings.HasPrefix(k, p) {
			delete(f, k)
		}
	}
	for svc, l := range map[string]render.RLSResult{"envoy": envoy, "windowstored": ws} {
		q := p + svc + "/"
		f[q+"decisions"] = figures.Figure{Value: l.Decisions, Unit: "/s"}
		f[q+"decisions_min"] = figures.Figure{Value: l.DecisionsMin, Unit: "/s"}
		f[q+"decisions_max"] = figures.Figure{Value: l.DecisionsMax, Unit: "/s"}
		f[q+"cpu_us"] = figures.Figure{Value: l.CPUUs, Unit: "µs"}
		f[q+"cpu_us_min"] = figures.Figure{Value: l.CPUUsMin, Unit: "µs"}
		f[q+"cpu_us_max"] = figures.Figure{Value: l.CPUUsMax, Unit: "µs"}
	}
	f[p+"cpu_vs_envoy"] = figures.Figure{Value: ws.CPUUs / envoy.CPUUs, Unit: "x"}
	f[p+"how"] = figures.Figure{How: how}
	fmt.Printf("figures: windowstored beside envoyproxy/ratelimit recorded as %s\n", name)
	return f.Write(figures.Path())
}

// input opens path for reading, or standard input for "-".
func input(path string) (*os.File, error) {
	if path == "-" {
		return os.Stdin, nil
	}
	return os.Open(path)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "figures:", err)
	os.Exit(1)
}
