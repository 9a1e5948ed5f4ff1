package main

import (
	"strings"
	"testing"

	"github.com/windowstore/windowstore/internal/redisaddr"
)

// TestDials: what the client dials for each form of --addr.
func TestDials(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7000": "127.0.0.1:7000", "localhost": "localhost:6379", "[::1]": "[::1]:6379",
		"[fe80::1%eth0]:6380": "[fe80::1%eth0]:6380", "redis://h": "h:6379",
	} {
		g := defaultGlobals()
		g.addr, g.addrSet = in, true
		opt, err := g.clientOption()
		if err != nil || len(opt.InitAddress) != 1 || opt.InitAddress[0] != want {
			t.Errorf("%q dials %v (%v), want %s", in, opt.InitAddress, err, want)
		}
	}
}

// TestAddrErrors: a bad address is a usage error (exit 2) that quotes it with
// the password hidden, names where it came from and says what is wanted.
func TestAddrErrors(t *testing.T) {
	tests := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--addr", "http://x:1", "sum", "k"},
			`windowctl: --addr "http://x:1": not a redis://, rediss:// or unix:// URL; want host:port or redis://host:port`},
		{map[string]string{addrEnv: "http://x:1"}, []string{"sum", "k"},
			`windowctl: $WINDOWSTORE_ADDR "http://x:1": not a redis://, rediss:// or unix:// URL; want host:port or redis://host:port`},
		{map[string]string{addrEnv: "  ::1  "}, []string{"sum", "k"},
			`windowctl: $WINDOWSTORE_ADDR "::1": an IPv6 address needs brackets: want [::1]:port`},
		// The flag wins over the environment.
		{map[string]string{addrEnv: "127.0.0.1:1"}, []string{"--addr", "h:x", "sum", "k"},
			`windowctl: --addr "h:x": port "x" is not a number from 1 to 65535; want host:port or redis://host:port`},
		{nil, []string{"sum", "k", "--addr", "redis://u:secret@h:abc"},
			`windowctl: --addr "redis://u:xxxxx@h:abc": not a valid URL; want host:port or redis://host:port`},
		{nil, []string{"--addr", "redis://h:abc", "sum", "k"},
			`windowctl: --addr "redis://h:abc": not a valid URL (invalid port ":abc" after host); want host:port or redis://host:port`},
		// url.Parse would quote "%zz", a piece of the password.
		{nil, []string{"--addr", "redis://u:sec%zzret@h:1", "sum", "k"},
			`windowctl: --addr "redis://u:xxxxx@h:1": not a valid URL; want host:port or redis://host:port`},
		{map[string]string{addrEnv: "http://u:secret@h:1"}, []string{"detect"},
			`windowctl: $WINDOWSTORE_ADDR "http://u:xxxxx@h:1": not a redis://, rediss:// or unix:// URL`},
		{nil, []string{"--addr", "u:secret@h:1", "demo"},
			`windowctl: --addr "u:xxxxx@h:1": credentials need a URL: want redis://USER:PASSWORD@host:port`},
		{nil, []string{"--addr", "127.0.0.1:1", "--tls-ca", "ca.pem", "sum", "k"},
			"windowctl: --tls-ca, --tls-cert and --tls-key need a rediss:// address"},
	}
	for _, tt := range tests {
		out, errs, code := call(t, tt.env, tt.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, tt.want) {
			t.Errorf("%v %q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.env, tt.args, code, out, errs, tt.want)
		}
		if strings.Contains(errs, "secret") || strings.Contains(errs, "zzret") {
			t.Errorf("%q printed the password: %q", tt.args, errs)
		}
	}
}

// TestAddrForms: host:port, a bare host and URLs reach the server (here:
// nothing listens, so the error is the connection's, exit 1, and the password
// is hidden in it).
func TestAddrForms(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:1", "[::1]:1", "redis://127.0.0.1:1", "redis://u:secret@127.0.0.1:1", "unix:///nonexistent/redis.sock"} {
		out, errs, code := call(t, nil, "--timeout", "2s", "--addr", addr, "sum", "k")
		if code != 1 || out != "" || !strings.HasPrefix(errs, "windowctl: connect to "+redisaddr.Redact(addr)+": ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", addr, code, out, errs)
		}
		if strings.Contains(errs, "secret") {
			t.Errorf("%s: printed the password: %q", addr, errs)
		}
	}
	// The environment names the server when --addr does not.
	_, errs, code := call(t, map[string]string{addrEnv: "127.0.0.1:1"}, "sum", "k")
	if code != 1 || !strings.Contains(errs, "connect to 127.0.0.1:1") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}
