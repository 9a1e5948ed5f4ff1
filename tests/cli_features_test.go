package tests

import (
	"os"
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
