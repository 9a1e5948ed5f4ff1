package tests

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/tests/harness"
)

// ctl runs windowctl against srv and returns stdout, stderr and the exit status.
func ctl(t *testing.T, srv *harness.Server, args ...string) (string, string, int) {
	t.Helper()
	return ctlRaw(t, append([]string{"--addr", srv.URL()}, args...)...)
}

// ctlRaw runs windowctl with exactly these arguments.
func ctlRaw(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return ctlEnv(t, nil, args...)
}

// ctlEnv runs windowctl with these arguments and, added to this process's
// environment, env ("NAME=value").
func ctlEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(harness.Windowctl(t), args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func jsonLine(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(s)), &m), s)
	return m
}

// TestWindowctlRedis70 walks the Foundation acceptance list with the real
// windowctl binary against a real Redis 7.0.
func TestWindowctlRedis70(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	prefix := "--prefix=" + harness.Prefix(t)
	// "sum without writing" reads the server's dirty counter: a server of
	// the test's own, where nothing else writes.
	own := harness.Fresh(t, harness.Redis70)
	oc := own.Client(t)

	t.Run("detect", func(t *testing.T) {
		out, errs, code := ctl(t, srv, "--json", "detect")
		require.Zero(t, code, errs)
		m := jsonLine(t, out)
		require.Equal(t, "nativehash-plain", m["backend"])
		require.Equal(t, false, m["field_ttl"])
		require.Equal(t, "redis", m["server"])
		require.True(t, strings.HasPrefix(m["version"].(string), "7.0."), m["version"])
		require.Equal(t, []any{}, m["modules"])
		require.NotEmpty(t, m["reason"])
	})

	t.Run("five adds, then sum without writing", func(t *testing.T) {
		for i := 1; i <= 5; i++ {
			out, errs, code := ctl(t, own, "--json", prefix, "add", "user42")
			require.Zero(t, code, errs)
			m := jsonLine(t, out)
			require.Equal(t, "user42", m["key"])
			require.EqualValues(t, i, m["sum"])
		}
		before := dirty(t, oc)
		out, errs, code := ctl(t, own, "--json", prefix, "sum", "user42", "nobody")
		require.Zero(t, code, errs)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2)
		require.Equal(t, map[string]any{"key": "user42", "sum": 5.0}, jsonLine(t, lines[0]))
		require.Equal(t, map[string]any{"key": "nobody", "sum": 0.0}, jsonLine(t, lines[1]))
		require.Equal(t, before, dirty(t, oc), "sum wrote to the server")
	})

	t.Run("sum drops to 0 after window + bucket, and the TTL stays within it", func(t *testing.T) {
		t.Parallel()
		// Its own context: a parallel subtest may start minutes after its
		// parent (CI failed it on the parent's, past its deadline).
		ctx := ctxT(t)
		// A window of 8 s in 2 s buckets: the four adds (each a process start)
		// and the sum must all fall within window - bucket = 6 s of the first
		// add for the sum to count all four: room for a slow, shared machine.
		w, b := 8*time.Second, 2*time.Second
		args := []string{"--json", prefix, "--window", w.String(), "--bucket", b.String()}
		// The keys windowctl's counter may be held in: with the plain hash,
		// its head and its buckets' hash.
		names := counterNames(strings.TrimPrefix(prefix, "--prefix=") + "{short}:8s/2s")
		first := time.Now()
		var last time.Time
		for i := 0; i < 4; i++ {
			_, errs, code := ctl(t, srv, append(args, "add", "short", "3")...)
			// Read once the add has returned: its bucket starts no later.
			last = time.Now()
			require.Zero(t, code, errs)
			held := false
			for _, rk := range names {
				pttl, err := c.Do(ctx, c.B().Pttl().Key(rk).Build()).AsInt64()
				require.NoError(t, err)
				if pttl == -2 {
					continue
				}
				held = true
				require.Greater(t, pttl, int64(0), rk)
				require.LessOrEqual(t, pttl, (w + b).Milliseconds(), "%s: TTL beyond window + bucket", rk)
			}
			require.True(t, held, "no key holds the counter")
			time.Sleep(200 * time.Millisecond)
		}
		out, _, _ := ctl(t, srv, append(args, "sum", "short")...)
		if took := time.Since(first); took < w-b {
			require.EqualValues(t, 12, jsonLine(t, out)["sum"])
		} else {
			t.Fatalf("four adds and a sum took %v, more than window - bucket (%v): the sum cannot be checked", took, w-b)
		}
		// Every bucket has left once the window has passed since the last add.
		time.Sleep(time.Until(last.Add(w + 50*time.Millisecond)))
		out, errs, code := ctl(t, srv, append(args, "sum", "short")...)
		require.Zero(t, code, errs)
		require.EqualValues(t, 0, jsonLine(t, out)["sum"])
		n, err := c.Do(ctx, c.B().Exists().Key(names...).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "idle counter still exists")
	})

	t.Run("40 concurrent allow processes admit exactly 10", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var results []map[string]any
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, errs, code := ctl(t, srv, "--json", prefix, "--window", "1m", "--bucket", "1s", "allow", "--limit", "10", "burst")
				if code != 0 && code != 3 { // 3: refused
					t.Errorf("exit %d: %s", code, errs)
					return
				}
				mu.Lock()
				results = append(results, jsonLine(t, out))
				mu.Unlock()
			}()
		}
		wg.Wait()
		require.Len(t, results, 40)
		allowed := 0
		for _, r := range results {
			require.Equal(t, "burst", r["key"])
			if r["allowed"] == true {
				allowed++
				require.EqualValues(t, 0, r["retry_after_ms"])
				continue
			}
			require.EqualValues(t, 10, r["sum"])
			require.EqualValues(t, 0, r["remaining"])
			ms := r["retry_after_ms"].(float64)
			require.Greater(t, ms, 0.0)
			require.LessOrEqual(t, ms, 60000.0)
		}
		require.Equal(t, 10, allowed)
	})

	t.Run("a refused allow exits 3 with its decision on stdout", func(t *testing.T) {
		args := []string{prefix, "--window", "1m", "--bucket", "1s", "allow", "--limit", "2"}
		out, errs, code := ctl(t, srv, append(args, "--json", "refuse", "2")...)
		require.Zero(t, code, errs)
		require.Equal(t, true, jsonLine(t, out)["allowed"])
		out, errs, code = ctl(t, srv, append(args, "--json", "refuse")...)
		require.Equal(t, 3, code, "stdout %q stderr %q", out, errs)
		require.Empty(t, errs)
		m := jsonLine(t, out)
		require.Equal(t, false, m["allowed"])
		require.EqualValues(t, 2, m["sum"])
		require.EqualValues(t, 0, m["remaining"])
		require.Greater(t, m["retry_after_ms"].(float64), 0.0)
		out, errs, code = ctl(t, srv, append(args, "refuse")...)
		require.Equal(t, 3, code, errs)
		require.True(t, strings.HasPrefix(out, "refuse\trefused, retry after "), out)
	})

	t.Run("sum prints an error for a bad key and goes on", func(t *testing.T) { // user42 is on own
		lists := cliCounterKeys(strings.TrimPrefix(prefix, "--prefix=") + "{notcounter}:1m/1s")
		for _, rk := range lists {
			require.NoError(t, oc.Do(ctx, oc.B().Rpush().Key(rk).Element("x").Build()).Error())
		}
		out, errs, code := ctl(t, own, "--json", prefix, "sum", "user42", "notcounter", "nobody")
		require.Equal(t, 1, code, "stdout %q stderr %q", out, errs)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		require.Equal(t, map[string]any{"key": "user42", "sum": 5.0}, jsonLine(t, lines[0]))
		require.Equal(t, map[string]any{"key": "notcounter", "error": "key holds a value that is not a counter"}, jsonLine(t, lines[1]))
		require.Equal(t, map[string]any{"key": "nobody", "sum": 0.0}, jsonLine(t, lines[2]))
		require.Contains(t, errs, "1 of 3 keys failed")
		out, _, code = ctl(t, own, prefix, "sum", "notcounter", "user42")
		require.Equal(t, 1, code)
		require.Equal(t, "notcounter\terror: key holds a value that is not a counter\nuser42\t5\n", out)
		for _, rk := range lists {
			n, err := oc.Do(ctx, oc.B().Llen().Key(rk).Build()).AsInt64()
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the list was touched")
		}
	})

	t.Run("host:port, and the address from $WINDOWSTORE_ADDR", func(t *testing.T) {
		out, errs, code := ctlRaw(t, "--addr", own.Addr, "--json", prefix, "sum", "user42")
		require.Zero(t, code, errs)
		require.EqualValues(t, 5, jsonLine(t, out)["sum"])
		out, errs, code = ctlEnv(t, []string{"WINDOWSTORE_ADDR=" + own.Addr}, "--json", prefix, "inspect", "user42")
		require.Zero(t, code, errs)
		require.Equal(t, "user42", jsonLine(t, out)["key"])
		_, errs, code = ctlEnv(t, []string{"WINDOWSTORE_ADDR=http://" + own.Addr}, prefix, "sum", "user42")
		require.Equal(t, 2, code)
		require.Contains(t, errs, `$WINDOWSTORE_ADDR "http://`+own.Addr+`": not a redis://, rediss:// or unix:// URL`)
	})

	t.Run("a key of another type is refused and untouched", func(t *testing.T) {
		rk := strings.TrimPrefix(prefix, "--prefix=") + "{str}:1m/1s"
		for _, k := range cliCounterKeys(rk) {
			require.NoError(t, c.Do(ctx, c.B().Set().Key(k).Value("keep me").Build()).Error())
		}
		for _, args := range [][]string{{"add", "str"}, {"sum", "str"}, {"allow", "--limit", "3", "str"}, {"inspect", "str"}} {
			out, errs, code := ctl(t, srv, append([]string{prefix}, args...)...)
			require.Equal(t, 1, code, "%v: %s %s", args, out, errs)
			require.Contains(t, errs, "not a counter", args)
		}
		v, err := c.Do(ctx, c.B().Get().Key(rk).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, "keep me", v)
	})

	t.Run("inspect", func(t *testing.T) {
		out, errs, code := ctl(t, srv, "--json", prefix, "inspect", "empty")
		require.Zero(t, code, errs)
		m := jsonLine(t, out)
		require.Contains(t, cliCounterKeys(strings.TrimPrefix(prefix, "--prefix=")+"{empty}:1m/1s"), m["redis_key"])
		require.Equal(t, []any{}, m["buckets"])
		out, errs, code = ctl(t, own, "--json", prefix, "inspect", "user42")
		require.Zero(t, code, errs)
		m = jsonLine(t, out)
		require.Equal(t, "nativehash-plain", m["backend"])
		bs := m["buckets"].([]any)
		require.NotEmpty(t, bs)
		b := bs[0].(map[string]any)
		for _, f := range []string{"field", "start", "value", "ttl_ms"} {
			require.Contains(t, b, f)
		}
		_, err := time.Parse(time.RFC3339, b["start"].(string))
		require.NoError(t, err)
	})
}

// TestWindowctlBadInput: bad usage exits 2 with a message, before any network use.
func TestWindowctlBadInput(t *testing.T) {
	t.Parallel()
	srv := &harness.Server{Addr: "127.0.0.1:1"} // nothing listens there: usage errors come first
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"zero window", []string{"--window", "0s", "add", "k"}, "window"},
		{"negative window", []string{"--window", "-1m", "add", "k"}, "window"},
		{"negative bucket", []string{"--bucket", "-1s", "add", "k"}, "bucket"},
		{"bucket does not divide", []string{"--window", "10s", "--bucket", "3s", "add", "k"}, "does not divide"},
		{"window too long", []string{"--window", "4400h", "--bucket", "1h", "add", "k"}, "longer than"},
		{"not a duration", []string{"--window", "ten", "add", "k"}, "duration"},
		{"non-integer delta", []string{"add", "k", "1.5"}, "not an integer"},
		{"delta beyond int64", []string{"add", "k", "9223372036854775808"}, "not an integer"},
		{"unknown flag", []string{"--nope", "add", "k"}, "nope"},
		{"unknown flag after command", []string{"add", "--nope", "k"}, "nope"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"no command", []string{}, "no command"},
		{"allow without limit", []string{"allow", "k"}, "--limit"},
		{"negative limit", []string{"allow", "--limit", "-3", "k"}, "--limit"},
		{"negative cost", []string{"allow", "--limit", "3", "k", "-1"}, "COST"},
		{"add without key", []string{"add"}, "usage"},
		{"sum without key", []string{"sum"}, "usage"},
		{"empty key", []string{"add", ""}, "empty key"},
		{"unknown backend", []string{"--backend", "memcached", "add", "k"}, "backend"},
		{"bad url", []string{"--addr", "http://x:1", "add", "k"}, "URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := ctl(t, srv, tt.args...)
			require.Equal(t, 2, code, "stdout %q stderr %q", out, errs)
			require.Contains(t, errs, tt.msg)
			require.Empty(t, out)
		})
	}
}

// TestWindowctlDetect: windowctl detect names the right backend on every
// server (field TTL on Redis 8 and Valkey 9, the plain hash on Redis 7.0 and
// Valkey 8.1), and says why: what the server lacks for the better ones.
func TestWindowctlDetect(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		if tg.backend != "auto" {
			continue // detect shows the automatic choice only
		}
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			srv := harness.Shared(t, tg.kind)
			out, errs, code := ctl(t, srv, "--json", "detect")
			require.Zero(t, code, errs)
			m := jsonLine(t, out)
			require.Equal(t, tg.wantBackend, m["backend"], out)
			require.Equal(t, tg.wantFieldTTL, m["field_ttl"], out)
			require.NotEmpty(t, m["reason"])
			if !tg.wantFieldTTL {
				// Valkey 8.1, Redis 7.0: why not the field-TTL backend.
				require.Contains(t, m["reason"], "nativehash-fieldttl needs HPEXPIREAT", out)
			}
			if tg.kind == harness.TairHash {
				require.Contains(t, m["modules"], "tairhash")
			}
			// Forcing a backend the server lacks is an error at construction.
			if tg.kind != harness.TairHash {
				_, errs, code = ctl(t, srv, "--backend", "tairhash", "sum", "k")
				require.Equal(t, 1, code)
				require.Contains(t, errs, "not available")
			}
		})
	}
}

// TestWindowctlFeatures checks the CLI contract of event ids, event times,
// multi-policy allow and distinct counts, with the built binary on a real
// server.
func TestWindowctlFeatures(t *testing.T) {
	srv := harness.Shared(t, harness.Redis70)
	prefix := "--prefix=" + harness.Prefix(t)

	t.Run("add --id counts an event once", func(t *testing.T) {
		out, errs, code := ctl(t, srv, "--json", prefix, "add", "--id", "evt-1", "k", "4")
		require.Zero(t, code, errs)
		require.Equal(t, map[string]any{"key": "k", "sum": 4.0, "duplicate": false}, jsonLine(t, out))
		out, errs, code = ctl(t, srv, "--json", prefix, "add", "--id", "evt-1", "k", "4")
		require.Zero(t, code, errs)
		require.Equal(t, map[string]any{"key": "k", "sum": 4.0, "duplicate": true}, jsonLine(t, out))
	})

	t.Run("add --at counts a late event in its own bucket, refuses one too old or too far ahead", func(t *testing.T) {
		now := time.Now().UTC()
		out, errs, code := ctl(t, srv, "--json", prefix, "--window", "1h", "--bucket", "1m", "add", "late", "1")
		require.Zero(t, code, errs)
		require.EqualValues(t, 1, jsonLine(t, out)["sum"])
		out, errs, code = ctl(t, srv, "--json", prefix, "--window", "1h", "--bucket", "1m", "add", "--at", now.Add(-30*time.Minute).Format(time.RFC3339), "late", "2")
		require.Zero(t, code, errs)
		require.Equal(t, map[string]any{"key": "late", "sum": 3.0, "duplicate": false}, jsonLine(t, out))
		out, errs, code = ctl(t, srv, "--json", prefix, "--window", "1h", "--bucket", "1m", "add", "--at", now.Add(-2*time.Hour).Format(time.RFC3339), "late", "2")
		require.Equal(t, 1, code, out)
		require.Contains(t, errs, "event older than the window")
		_, errs, code = ctl(t, srv, prefix, "--window", "1h", "--bucket", "1m", "add", "--at", now.Add(time.Hour).Format(time.RFC3339), "late", "2")
		require.Equal(t, 1, code)
		require.Contains(t, errs, "event time too far ahead of the clock")
		_, errs, code = ctl(t, srv, prefix, "add", "--at", "yesterday", "late")
		require.Equal(t, 2, code)
		require.Contains(t, errs, "not an RFC 3339 time")
		out, _, _ = ctl(t, srv, "--json", prefix, "--window", "1h", "--bucket", "1m", "sum", "late")
		require.EqualValues(t, 3, jsonLine(t, out)["sum"], "refused events wrote")
	})

	t.Run("allow with two policies is atomic and names both", func(t *testing.T) {
		args := []string{"--json", prefix, "--bucket", "1s", "allow", "--limit", "3/10s", "--limit", "5/1m", "multi"}
		var mu sync.Mutex
		var outs []map[string]any
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, errs, code := ctl(t, srv, args...)
				if code != 0 && code != 3 {
					t.Errorf("exit %d: %s", code, errs)
					return
				}
				mu.Lock()
				outs = append(outs, jsonLine(t, out))
				mu.Unlock()
			}()
		}
		wg.Wait()
		admitted := 0
		for _, m := range outs {
			ps := m["policies"].([]any)
			require.Len(t, ps, 2)
			p0, p1 := ps[0].(map[string]any), ps[1].(map[string]any)
			require.EqualValues(t, 3, p0["limit"])
			require.EqualValues(t, 10000, p0["window_ms"])
			require.EqualValues(t, 5, p1["limit"])
			require.EqualValues(t, 60000, p1["window_ms"])
			if m["allowed"] == true {
				admitted++
				continue
			}
			require.EqualValues(t, 3, m["sum"], "the 10s policy decides")
			require.Greater(t, m["retry_after_ms"].(float64), 0.0)
		}
		require.Equal(t, 3, admitted)
		out, _, _ := ctl(t, srv, "--json", prefix, "--window", "1m", "sum", "multi")
		require.EqualValues(t, 3, jsonLine(t, out)["sum"], "refused calls counted in the minute's window")
		_, errs, code := ctl(t, srv, prefix, "--bucket", "7s", "allow", "--limit", "3/10s", "k")
		require.Equal(t, 2, code)
		require.Contains(t, errs, "does not divide")
	})

	t.Run("distinct add and count", func(t *testing.T) {
		out, errs, code := ctl(t, srv, "--json", prefix, "distinct", "add", "dev", "card1", "card2", "card1")
		require.Zero(t, code, errs)
		require.Equal(t, map[string]any{"key": "dev", "distinct": 2.0}, jsonLine(t, out))
		_, _, code = ctl(t, srv, "--json", prefix, "distinct", "add", "dev2", "card9")
		require.Zero(t, code)
		out, errs, code = ctl(t, srv, "--json", prefix, "distinct", "count", "dev", "dev2", "nobody")
		require.Zero(t, code, errs)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Equal(t, []map[string]any{{"key": "dev", "distinct": 2.0}, {"key": "dev2", "distinct": 1.0}, {"key": "nobody", "distinct": 0.0}},
			[]map[string]any{jsonLine(t, lines[0]), jsonLine(t, lines[1]), jsonLine(t, lines[2])})
		_, errs, code = ctl(t, srv, prefix, "distinct", "add", "dev")
		require.Equal(t, 2, code)
		require.Contains(t, errs, "usage: distinct")
	})
}

// TestREADMEServerErrors runs the rows of docs/windowctl.md's bad-input table that a
// server refuses (exit 1) with the built windowctl on a real server, and
// checks each message word for word; every such row must be covered here.
func TestREADMEServerErrors(t *testing.T) {
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	prefix := harness.Prefix(t)
	b, err := os.ReadFile(filepath.Join("..", "docs", "windowctl.md"))
	require.NoError(t, err)
	var want []string
	row := regexp.MustCompile("(?m)^\\| [^`|][^|]* \\| `([^`]*)`[^|]* \\| 1 \\|$")
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		want = append(want, m[1])
	}
	for _, str := range cliCounterKeys(prefix + "{str}:1m/1s") {
		require.NoError(t, c.Do(ctx, c.B().Set().Key(str).Value("x").Build()).Error())
	}
	cases := map[string][]string{
		"key holds a value that is not a counter": {"add", "str"},
		"counter overflow":                        {"add", "big", "1"},
		"event older than the window":             {"add", "--at", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "late"},
	}
	_, errs, code := ctl(t, srv, "--prefix", prefix, "add", "big", "9223372036854775807")
	require.Zero(t, code, errs)
	var got []string
	for msg, args := range cases {
		_, errs, code := ctl(t, srv, append([]string{"--prefix", prefix}, args...)...)
		require.Equal(t, 1, code, "%v: %s", args, errs)
		first, _, _ := strings.Cut(errs, "\n")
		require.Contains(t, first, ": "+msg, "%v", args)
		require.True(t, strings.HasPrefix(first, "windowctl: store: add "), first)
		got = append(got, msg)
	}
	slices.Sort(want)
	slices.Sort(got)
	require.Equal(t, want, got, "docs/windowctl.md's server rows and this test disagree")
}

// TestDemoEmbeddedAsRedis: the demo answers on its embedded server (the
// README's first command) row for row what it answers on a real Redis 7.0:
// the stand-in's answers are Redis's.
func TestDemoEmbeddedAsRedis(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	onRedis, errs, code := ctl(t, srv, "--json", "demo")
	require.Zero(t, code, errs)
	embedded, errs, code := ctlRaw(t, "--json", "demo")
	require.Zero(t, code, errs)
	require.Contains(t, errs, "EMBEDDED")
	require.Equal(t, strings.Split(onRedis, "\n"), strings.Split(embedded, "\n"))
	require.Contains(t, embedded, "users on this IP 1", "the first login's distinct count")
}
