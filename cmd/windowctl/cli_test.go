package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// call runs windowctl in-process with no $WINDOWSTORE_ADDR (unless env says
// otherwise) and returns stdout, stderr and the exit status.
func call(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	old := getenv
	getenv = func(k string) string { return env[k] }
	defer func() { getenv = old }()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func jsonObject(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", line, err)
	}
	return m
}

// TestGlobalHelp: help, -h, --help (with or without --json) print the global
// usage on stdout and exit 0; it lists every command, global flag and exit
// status.
func TestGlobalHelp(t *testing.T) {
	want := globalUsage()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}, {"--json", "help"}, {"--json", "-h"}, {"help", "--json"}} {
		out, errs, code := call(t, nil, args...)
		if code != 0 || errs != "" || out != want {
			t.Errorf("%q: exit %d, stderr %q, stdout %q", args, code, errs, out)
		}
	}
	for _, c := range commands {
		if !strings.Contains(want, "\n  "+strings.TrimSpace(c.name+" "+c.args)+" ") || !strings.Contains(want, c.summary) {
			t.Errorf("the global usage lacks %s", c.name)
		}
	}
	for _, f := range []string{"--addr ADDR", "--window DURATION", "--bucket DURATION", "--backend NAME", "--prefix STRING",
		"--timeout DURATION", "--json", "--tls-ca FILE", "--tls-cert FILE", "--tls-key FILE", "--version", "-h, --help",
		"$WINDOWSTORE_ADDR", "host:port", "[ipv6]:port", "redis://", "rediss://", "unix://"} {
		if !strings.Contains(want, f) {
			t.Errorf("the global usage lacks %q", f)
		}
	}
	for _, s := range []string{"  0  success", "  1  an error", "  2  bad usage", "  3  allow refused"} {
		if !strings.Contains(want, s) {
			t.Errorf("the global usage lacks the exit status %q", s)
		}
	}
}

// TestCommandHelp: help CMD, CMD -h and CMD --help print that command's usage
// (not the global one) on stdout and exit 0, for every command.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		want := c.usage()
		if !strings.HasPrefix(want, "usage: windowctl [flags] "+c.name) {
			t.Errorf("%s: usage starts %q", c.name, want)
		}
		if want == globalUsage() || strings.Contains(want, "commands:") {
			t.Errorf("%s: usage is the global one", c.name)
		}
		for _, args := range [][]string{{"help", c.name}, {c.name, "-h"}, {c.name, "--help"}, {c.name, "-help"},
			{"--json", c.name, "--help"}, {c.name, "x", "--help"}, {"--window", "0s", c.name, "-h"}} {
			out, errs, code := call(t, nil, args...)
			if code != 0 || errs != "" || out != want {
				t.Errorf("%q: exit %d, stderr %q, stdout %q", args, code, errs, out)
			}
		}
	}
	// Each command's own flags and JSON shape are in its help.
	for name, want := range map[string][]string{
		"allow": {"--limit N", "exits with status 3", `"retry_after_ms":N`},
		"sum":   {`{"key":K,"error":"key holds a value that is not a counter"}`, "KEY<TAB>error: MESSAGE"},
		"demo":  {`"time_s":N`, `"decision"`, "stderr"},
		"add":   {`{"key":K,"sum":N}`},
	} {
		u := lookup(name).usage()
		for _, w := range want {
			if !strings.Contains(u, w) {
				t.Errorf("help %s lacks %q:\n%s", name, w, u)
			}
		}
	}
	if strings.Contains(lookup("add").usage(), "--limit") {
		t.Error("add's help lists allow's --limit")
	}
}

// TestVersion: --version and version print the module and Go versions, exit 0.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"--window", "0s", "--version"}, {"add", "--version"}} {
		out, errs, code := call(t, nil, args...)
		if code != 0 || errs != "" {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errs)
		}
		if !strings.HasPrefix(out, "windowctl version ") || !strings.Contains(out, runtime.Version()) ||
			!strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) || strings.Count(out, "\n") != 1 {
			t.Errorf("%q: %q", args, out)
		}
	}
	out, _, code := call(t, nil, "--json", "--version")
	m := jsonObject(t, strings.TrimSpace(out))
	if code != 0 || m["go"] != runtime.Version() || m["version"] == "" || m["module"] != "github.com/windowstore/windowstore/cmd/windowctl" {
		t.Errorf("exit %d: %v", code, m)
	}
	// A test binary carries no version of its own: it is a build from a checkout.
	if v := version(); v.Version != "(devel)" {
		t.Errorf("version %q, want (devel)", v.Version)
	}
}

// TestBadUsage: every bad input exits 2 with its message on stderr and nothing
// on stdout, before any network use (nothing listens at 127.0.0.1:1).
func TestBadUsage(t *testing.T) {
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"--window", "0s", "add", "k"}, "--window 0s: must be positive"},
		{[]string{"--window", "-1m", "add", "k"}, "--window -1m0s: must be positive"},
		{[]string{"add", "k", "--window", "-1m"}, "--window -1m0s: must be positive"},
		{[]string{"--bucket", "-1s", "add", "k"}, "--bucket -1s: must be positive"},
		{[]string{"--window", "10s", "--bucket", "3s", "add", "k"}, "bucket 3s does not divide window 10s"},
		{[]string{"--window", "4400h", "--bucket", "1h", "add", "k"}, "window 4400h0m0s is longer than the maximum 4320h0m0s"},
		{[]string{"--window", "ten", "add", "k"}, "not a duration"},
		{[]string{"add", "k", "1.5"}, `add: DELTA "1.5" is not an integer`},
		{[]string{"add", "k", "9223372036854775808"}, `DELTA "9223372036854775808" is not an integer`},
		{[]string{"--nope", "add", "k"}, "flag provided but not defined: -nope"},
		{[]string{"add", "--nope", "k"}, "add: flag provided but not defined: -nope"},
		{[]string{"add", "k", "--nope"}, "add: flag provided but not defined: -nope"},
		{[]string{"add", "--limit", "3", "k"}, "add: flag provided but not defined: -limit"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{}, "no command given"},
		{[]string{"allow", "k"}, "allow: --limit N is required, with N >= 0"},
		{[]string{"allow", "--limit", "-3", "k"}, "allow: --limit -3: N must be an integer >= 0"},
		{[]string{"allow", "--limit", "abc", "k"}, "allow: --limit abc: N must be an integer >= 0"},
		{[]string{"allow", "--limit", "3", "k", "-1"}, `allow: COST "-1" is not a non-negative integer`},
		{[]string{"allow", "k", "-1", "--limit", "3"}, `allow: COST "-1" is not a non-negative integer`},
		{[]string{"allow", "--limit", "9007199254740993", "k"}, "allow: --limit 9007199254740993: N is over the maximum 2^53"},
		{[]string{"allow", "--limit", "3", "k", "9007199254740993"}, `allow: COST "9007199254740993" is over the maximum 2^53`},
		{[]string{"allow", "--limit", "3/10s", "--limit", "5/10s", "k"}, "allow: --limit 3/10s and --limit 5/10s both limit the window 10s"},
		{[]string{"allow", "--limit", "3", "--limit", "5/1m0s", "k"}, "allow: --limit 3 and --limit 5/1m0s both limit the window 1m0s"},
		{[]string{"--prefix", "a{b", "add", "k"}, `--prefix "a{b": must not contain a brace`},
		{[]string{"allow", "--limit", "3"}, "usage: allow --limit N KEY [COST]"},
		{[]string{"add"}, "usage: add KEY [DELTA]"},
		{[]string{"add", "a", "1", "2"}, "usage: add KEY [DELTA]"},
		{[]string{"sum"}, "usage: sum KEY..."},
		{[]string{"inspect", "a", "b"}, "usage: inspect KEY"},
		{[]string{"add", ""}, "empty key"},
		{[]string{"sum", "a", ""}, "sum: empty key"},
		{[]string{"detect", "x"}, "detect takes no arguments"},
		{[]string{"demo", "x"}, "demo takes no arguments"},
		{[]string{"version", "x"}, "version takes no arguments"},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "add", "sum"}, "usage: help [COMMAND]"},
		{[]string{"--backend", "memcached", "add", "k"}, `--backend "memcached": want auto, tairhash, nativehash, nativehash-fieldttl, nativehash-plain`},
		{[]string{"--addr", "http://x", "add", "k"}, `--addr "http://x": not a redis://, rediss:// or unix:// URL; want host:port or redis://host:port`},
		{[]string{"--tls-ca", "ca.pem", "add", "k"}, "need a rediss:// address"},
		{[]string{"--addr", "rediss://127.0.0.1:1", "--tls-cert", "c.pem", "add", "k"}, "--tls-cert and --tls-key go together"},
	}
	for _, tt := range tests {
		args := tt.args
		if !strings.Contains(strings.Join(args, " "), "--addr") {
			args = append([]string{"--addr", "127.0.0.1:1"}, args...)
		}
		out, errs, code := call(t, nil, args...)
		if code != 2 || out != "" || !strings.Contains(errs, tt.msg) || !strings.HasPrefix(errs, "windowctl: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, out, errs, tt.msg)
		}
		if !strings.Contains(errs, "run 'windowctl help") {
			t.Errorf("%q: no pointer to the usage: %q", tt.args, errs)
		}
	}
	// The pointer names the command whose usage applies.
	_, errs, _ := call(t, nil, "add", "k", "1.5")
	if !strings.Contains(errs, "run 'windowctl help add' for usage") {
		t.Errorf("stderr %q", errs)
	}
}

// TestInterspersed: flags and arguments mix; "--" ends the flags; a negative
// number is an argument.
func TestInterspersed(t *testing.T) {
	g := defaultGlobals()
	fs := newFlagSet("allow")
	g.register(fs)
	limit := fs.Int64("limit", -1, "")
	pos, err := parseInterspersed(fs, []string{"k", "--json", "-1", "--limit", "-3", "--prefix=p:", "--", "--window", "-x"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pos, " "); got != "k -1 --window -x" || !g.json || *limit != -3 || g.prefix != "p:" {
		t.Errorf("pos %q json %v limit %d prefix %q", got, g.json, *limit, g.prefix)
	}
	for a, want := range map[string]bool{"-1": false, "-.5": false, "-": false, "k": false, "--json": true, "-x": true, "--": true} {
		if isFlag(a) != want {
			t.Errorf("isFlag(%q) = %v", a, !want)
		}
	}
}
