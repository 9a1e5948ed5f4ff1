package main

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/store"
)

// These tests run the counter commands on an embedded miniredis (the demo's
// server) to check windowctl's own behaviour: exit statuses, per-key errors,
// JSON shapes. tests/windowctl_test.go runs the built binary on real servers (and
// sum, which miniredis cannot run on the server's clock).

func embedded(t *testing.T) (*miniredis.Miniredis, func(args ...string) (string, string, int)) {
	t.Helper()
	mr, err := embeddedServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mr.Close)
	return mr, func(args ...string) (string, string, int) {
		t.Helper()
		// miniredis lists HPEXPIREAT but cannot run it: the plain hash.
		return call(t, nil, append([]string{"--addr", mr.Addr(), "--backend", "nativehash-plain", "--prefix", "t:"}, args...)...)
	}
}

func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

// TestAllowExitStatus: allowed exits 0, refused exits 3 with the decision on
// stdout and nothing on stderr, in JSON and in text.
func TestAllowExitStatus(t *testing.T) {
	_, ctl := embedded(t)
	for i := 0; i < 2; i++ {
		out, errs, code := ctl("--json", "allow", "--limit", "2", "k")
		if code != 0 || errs != "" || jsonObject(t, out)["allowed"] != true {
			t.Fatalf("allow %d: exit %d, stdout %q, stderr %q", i, code, out, errs)
		}
	}
	out, errs, code := ctl("allow", "k", "--limit", "2", "--json")
	m := jsonObject(t, out)
	if code != exitRefused || errs != "" || m["allowed"] != false || m["sum"] != 2.0 || m["remaining"] != 0.0 {
		t.Errorf("refused: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if ms := m["retry_after_ms"].(float64); ms <= 0 || ms > 60000 {
		t.Errorf("retry_after_ms %v", ms)
	}
	out, errs, code = ctl("allow", "--limit", "2", "k")
	if code != exitRefused || errs != "" || !strings.HasPrefix(out, "k\trefused, retry after ") {
		t.Errorf("refused, text: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// A cost over the limit never fits: refused too, retry_after_ms -1.
	out, _, code = ctl("--json", "allow", "--limit", "2", "other", "3")
	if m := jsonObject(t, out); code != exitRefused || m["retry_after_ms"] != -1.0 {
		t.Errorf("cost over the limit: exit %d, stdout %q", code, out)
	}
	// A limit of 0 with a cost of 0 is allowed.
	if _, errs, code := ctl("allow", "--limit", "0", "zero", "0"); code != 0 {
		t.Errorf("cost 0: exit %d, %s", code, errs)
	}
}

// TestAllowLateInTheYear: allow on the embedded server at the end of a
// year, where a one-second bucket's code is near 31.5 million, across a
// bucket move and the year's end: each call answers at once and allocates
// little. (A move once cached its field names in a table under the code,
// and gopher-lua, miniredis's Lua, fills a table's array up to a positive
// integer key: 2.4 GB and seconds per call, `allow` timing out.)
func TestAllowLateInTheYear(t *testing.T) {
	mr, ctl := embedded(t)
	at := time.Date(2026, 12, 31, 23, 59, 58, 500e6, time.UTC)
	for i, step := range []time.Duration{0, 0, time.Second, time.Second, time.Second} {
		at = at.Add(step)
		mr.SetTime(at)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, errs, code := ctl("--json", "allow", "--limit", "2", "k")
		runtime.ReadMemStats(&after)
		m := jsonObject(t, out)
		want := i < 2 // two admitted, then refused: the window is a minute
		if errs != "" || m["allowed"] != want || (code == 0) != want || m["sum"] != float64(min(i+1, 2)) {
			t.Errorf("call %d at %v: exit %d, stdout %q, stderr %q", i, at, code, out, errs)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 256<<20 {
			t.Errorf("call %d at %v allocated %d MB", i, at, d>>20)
		}
	}
}

// TestAllowPolicies: allow with --limit N/WINDOW lists every policy, with its
// window, and counts COST in every one or in none.
func TestAllowPolicies(t *testing.T) {
	_, ctl := embedded(t)
	for i := 0; i < 2; i++ {
		out, errs, code := ctl("--json", "allow", "--limit", "2/10s", "--limit", "3/1m", "k")
		if code != 0 || errs != "" {
			t.Fatalf("allow %d: exit %d, stdout %q, stderr %q", i, code, out, errs)
		}
	}
	out, errs, code := ctl("--json", "allow", "--limit", "2/10s", "--limit", "3/1m", "k")
	m := jsonObject(t, out)
	if code != exitRefused || errs != "" || m["allowed"] != false || m["sum"] != 2.0 || m["remaining"] != 0.0 {
		t.Fatalf("refused: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	ps, _ := m["policies"].([]any)
	if len(ps) != 2 {
		t.Fatalf("policies %v", m["policies"])
	}
	p0, p1 := ps[0].(map[string]any), ps[1].(map[string]any)
	if p0["limit"] != 2.0 || p0["window_ms"] != 10000.0 || p0["sum"] != 2.0 || p0["retry_after_ms"].(float64) <= 0 ||
		p1["limit"] != 3.0 || p1["window_ms"] != 60000.0 || p1["sum"] != 2.0 || p1["remaining"] != 1.0 || p1["retry_after_ms"] != 0.0 {
		t.Errorf("policies %v", ps)
	}
	// One N/WINDOW limit: one policy, the decision's own.
	out, _, code = ctl("--json", "allow", "--limit", "5/10s", "one")
	m = jsonObject(t, out)
	ps, _ = m["policies"].([]any)
	if code != 0 || len(ps) != 1 || ps[0].(map[string]any)["window_ms"] != 10000.0 || ps[0].(map[string]any)["sum"] != 1.0 {
		t.Errorf("one policy: exit %d, %v", code, m)
	}
	out, _, _ = ctl("allow", "--limit", "5/10s", "one")
	if !strings.HasPrefix(out, "one\tallowed\tsum 2\tremaining 3\n  limit 5 per 10s: sum 2, remaining 3, retry after 0s") {
		t.Errorf("text: %q", out)
	}
}

// TestSumKeyErrors: a key that fails gets an error line in its place, the
// others are printed in order, and the command fails (exit 1). miniredis
// refuses TIME in read-only scripts, so sum runs here on the client's clock;
// tests/windowctl_test.go runs the whole command on a real server.
func TestSumKeyErrors(t *testing.T) {
	mr := miniredis.RunT(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	st, err := store.New(ctx, client, store.Window{Length: time.Minute, Bucket: time.Second},
		store.WithBackend("nativehash-plain"), store.WithPrefix("t:"), store.WithClientClock(time.Now))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Add(ctx, "a", 4); err != nil {
		t.Fatal(err)
	}
	if err := mr.Set("t:{str}:1m/1s:b", "keep me"); err != nil {
		t.Fatal(err)
	}
	sum := func(json bool, keys ...string) (string, int) {
		var out, errb bytes.Buffer
		c := &cli{st: st, p: &printer{&out, json}}
		code := exitCode(c.sum(ctx, keys), &errb)
		if errb.String() != "" {
			out.WriteString("STDERR " + errb.String())
		}
		return out.String(), code
	}

	const bad = `key holds a value that is not a counter`
	out, code := sum(true, "a", "str", "nobody")
	want := `{"key":"a","sum":4}` + "\n" +
		`{"key":"str","error":"` + bad + `"}` + "\n" +
		`{"key":"nobody","sum":0}` + "\n" +
		`STDERR windowctl: sum: 1 of 3 keys failed (first: "str": ` + bad + `)` + "\n"
	if code != exitError || out != want {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
	out, code = sum(false, "str", "a", "str")
	want = "str\terror: " + bad + "\na\t4\nstr\terror: " + bad + "\n" +
		`STDERR windowctl: sum: 2 of 3 keys failed (first: "str": ` + bad + `)` + "\n"
	if code != exitError || out != want {
		t.Errorf("text: exit %d, output:\n%s", code, out)
	}
	if v, _ := mr.Get("t:{str}:1m/1s:b"); v != "keep me" {
		t.Errorf("the string became %q", v)
	}
	// Every key good: exit 0, nothing on stderr.
	out, code = sum(true, "a")
	if code != 0 || out != `{"key":"a","sum":4}`+"\n" {
		t.Errorf("exit %d, output %q", code, out)
	}
}

// TestKeyError: a key's error is said once, without the store's prefixes; a
// key of another type says just that.
func TestKeyError(t *testing.T) {
	wrong := &store.Error{Op: "sum", Key: "k", Kind: store.ErrWrongType, Err: errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")}
	if got := keyError("k", wrong); got != "key holds a value that is not a counter" {
		t.Errorf("%q", got)
	}
	acl := &store.Error{Op: "sum", Key: "k", Kind: store.ErrNoPermission, Detail: "NOPERM no permissions to run the 'evalsha_ro' command"}
	if got := keyError("k", acl); got != "the server's ACL denies this: NOPERM no permissions to run the 'evalsha_ro' command" {
		t.Errorf("%q", got)
	}
	if got := keyError("k", &store.Error{Op: "sum", Key: "k", Detail: "context deadline exceeded", Err: context.DeadlineExceeded}); got != "context deadline exceeded" {
		t.Errorf("%q", got)
	}
}

// TestJSONEveryCommand: with --json, the commands print only JSON objects on
// stdout, one per line (sum and inspect, which miniredis cannot run on the
// server's clock, in tests/windowctl_test.go; demo in TestDemoJSON).
func TestJSONEveryCommand(t *testing.T) {
	_, ctl := embedded(t)
	for _, args := range [][]string{
		{"detect"}, {"add", "k", "-2"}, {"allow", "--limit", "9", "k"}, {"version"},
	} {
		out, errs, code := ctl(append([]string{"--json"}, args...)...)
		if code != 0 || errs != "" || out == "" {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errs)
		}
		for _, l := range lines(out) {
			jsonObject(t, l)
		}
	}
	out, _, _ := ctl("--json", "add", "k", "-2")
	if out != `{"key":"k","sum":-3}`+"\n" {
		t.Errorf("add: %q", out)
	}
	out, _, _ = ctl("--json", "detect")
	if m := jsonObject(t, out); m["backend"] != "nativehash-plain" || m["field_ttl"] != false {
		t.Errorf("detect: %v", m)
	}
}

// TestDemoJSON: the demo on the embedded server prints one object per row of
// its table on stdout, and its notes on stderr.
func TestDemoJSON(t *testing.T) {
	out, errs, code := call(t, nil, "--json", "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	rows := lines(out)
	if len(rows) != 24 {
		t.Fatalf("%d rows:\n%s", len(rows), out)
	}
	first, refused := jsonObject(t, rows[0]), jsonObject(t, rows[6])
	if first["time_s"] != 0.0 || first["event"] != "login attempt by user42" || first["sum"] != 1.0 || first["decision"] != "ALLOWED, 4 left" {
		t.Errorf("first row %v", first)
	}
	if refused["time_s"] != 22.0 || !strings.HasPrefix(refused["decision"].(string), "REFUSED") {
		t.Errorf("row 7 %v", refused)
	}
	if !strings.Contains(errs, "EMBEDDED") || !strings.Contains(errs, "What happened") {
		t.Errorf("stderr %q", errs)
	}
	// Text: the notes and the table on stdout, nothing on stderr.
	out, errs, code = call(t, nil, "demo")
	if code != 0 || errs != "" || !strings.Contains(out, "EMBEDDED") || !strings.Contains(out, "+22s    login attempt by user42") {
		t.Errorf("text: exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
}
