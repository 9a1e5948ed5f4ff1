package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// call runs bench in-process and returns stdout, stderr and the exit status.
func call(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestHelp: --help prints the flags and the JSON shape on stdout, exit 0.
func TestHelp(t *testing.T) {
	out, errs, code := call("--help")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, w := range []string{"--keys N", "--buckets LIST", "--duration DURATION", "--ops LIST", "--batch-ops N", "--addr ADDR",
		"--json", `"ops_per_sec"`, "rawhincrby"} {
		if !strings.Contains(strings.ReplaceAll(out, "\n  -", "\n  --"), w) {
			t.Errorf("--help lacks %q:\n%s", w, out)
		}
	}
}

// TestBadUsage: bad flags exit 2 with a message on stderr, before anything is
// sent (nothing listens at 127.0.0.1:1).
func TestBadUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"x"}, "bench takes no arguments"},
		{[]string{"--keys", "5"}, "--keys 5: want 100 to 1,000,000"},
		{[]string{"--ops", "add,frob"}, `unknown op "frob"`},
		{[]string{"--buckets", "0"}, `--buckets "0": want numbers from 1 to 1440`},
		{[]string{"--pairs", "26"}, "--pairs 26: want 1 to 25"},
		{[]string{"--backend", "memcached"}, `--backend "memcached": want auto`},
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
		{[]string{"--tls-ca", "ca.pem"}, "need a rediss:// address"},
	} {
		out, errs, code := call(append([]string{"--addr", "127.0.0.1:1"}, tt.args...)...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, "bench: ") || !strings.Contains(errs, tt.msg) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, out, errs, tt.msg)
		}
	}
}

// TestJSON: --json prints one object per operation and window, and nothing
// else.
func TestJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a short benchmark")
	}
	mr := miniredis.RunT(t)
	// miniredis lists HPEXPIREAT but cannot run it: the plain hash.
	out, errs, code := call("--addr", mr.Addr(), "--backend", "nativehash-plain", "--json", "--keys", "100", "--goroutines", "2",
		"--duration", "100ms", "--buckets", "2", "--ops", "add,rawhincrby")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(rows) != 2 {
		t.Fatalf("stdout:\n%s", out)
	}
	for i, op := range []string{"add", "rawhincrby"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(rows[i]), &m); err != nil {
			t.Fatalf("not a JSON object: %q: %v", rows[i], err)
		}
		if m["op"] != op || m["buckets"] != 2.0 || m["backend"] != "nativehash-plain" || m["ops_per_sec"].(float64) <= 0 {
			t.Errorf("row %d: %v", i, m)
		}
	}
}

// TestPacedKeys: in pairs, the slower operation runs over a share of the
// keys in proportion to the two throughputs, so both see one pace; the
// faster keeps every key; never under 100, and every key when a
// throughput is unknown.
func TestPacedKeys(t *testing.T) {
	for _, tt := range []struct {
		op, base     float64
		wantOp, want int
	}{
		{10000, 20000, 5000, 10000},
		{30000, 10000, 10000, 3333},
		{20000, 20000, 10000, 10000},
		{1, 20000, 100, 10000},
		{0, 20000, 10000, 10000},
		{20000, -1, 10000, 10000},
	} {
		op, base := pacedKeys(10000, tt.op, tt.base)
		if op != tt.wantOp || base != tt.want {
			t.Errorf("pacedKeys(10000, %v, %v) = %d, %d; want %d, %d", tt.op, tt.base, op, base, tt.wantOp, tt.want)
		}
	}
}

// TestPairTargetsPaced: each target's pairs run its slower operation over
// pacedKeys' share of the keys and the faster over all, a warm-up then a
// half-run slice each, the order alternating, and the ratio is the median
// of the pairs' ratios of server times.
func TestPairTargetsPaced(t *testing.T) {
	cfg := benchConfig{runs: 3, pairs: 4, duration: 2 * time.Second}
	byOp := map[string]*benchResult{"allow": {OpsPerSec: 20000}, "allow3": {OpsPerSec: 8000}}
	type call struct {
		name string
		keys int
		d    time.Duration
	}
	var calls []call
	us := map[string]float64{"allow": 10, "allow3": 13}
	out := pairTargets(cfg, 10000, byOp, func(c benchConfig, keys int, name string) benchRunResult {
		calls = append(calls, call{name, keys, c.duration})
		return benchRunResult{ops: 1, serverUs: us[name]}
	})
	if len(out) != 1 || out[0].Target != "allow3/allow" || out[0].Pairs != 4 || out[0].Ratio != 1.3 ||
		out[0].OpKeys != 4000 || out[0].BaseKeys != 10000 {
		t.Fatalf("pairTargets = %+v; want allow3/allow, 4 pairs, 1.3x, over 4000 and 10000 keys", out)
	}
	want := []string{"allow", "allow3", "allow3", "allow", "allow", "allow3", "allow3", "allow"}
	if len(calls) != 2*len(want) {
		t.Fatalf("%d runs, want %d: %v", len(calls), 2*len(want), calls)
	}
	for i, c := range calls {
		keys := map[string]int{"allow": 10000, "allow3": 4000}[c.name]
		d := time.Second
		if i%2 == 0 {
			d = 500 * time.Millisecond // the warm-up
		}
		if c.name != want[i/2] || c.keys != keys || c.d != d {
			t.Errorf("run %d: %+v; want %s over %d keys for %v", i, c, want[i/2], keys, d)
		}
	}
}
