package limit

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/acldoc"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/internal/limitlua"
	"github.com/windowstore/windowstore/internal/resptest"
	"github.com/windowstore/windowstore/store"
)

func TestPolicyNameIsToken(t *testing.T) {
	for _, ok := range []string{"perminute", "*", "a:b/c", "x-1_2.3~"} {
		if !keyspace.Token(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "1a", "a b", "a{b}", "é", "a,b"} {
		if keyspace.Token(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestConstructorErrors(t *testing.T) {
	c, _ := resptest.Client(t, nil)
	tests := []struct {
		err  error
		want string
	}{
		{func() error { _, err := NewLog(c, "1x", 5, time.Minute); return err }(),
			"limit: 1x: invalid argument: policy name \"1x\" is not a token (a letter or *, then letters, digits or :/!#$%&'*+-.^_`|~)"},
		{func() error { _, err := NewLog(c, "p", -1, time.Minute); return err }(), "limit: p: invalid argument: limit -1 is not within [0, 2^53]"},
		{func() error { _, err := NewFixedWindow(c, "p", 5, time.Microsecond); return err }(),
			"limit: p: invalid argument: window 1µs is not a positive whole number of milliseconds"},
		{func() error { _, err := NewLog(nil, "p", 5, time.Minute); return err }(), "limit: p: invalid argument: nil client"},
		{func() error { _, err := NewLog(c, "p", 5, time.Minute, WithPrefix("a{")); return err }(),
			"limit: p: invalid argument: prefix or suffix \"a{\" contains a brace"},
		{func() error { _, err := NewSlidingWindow(nil, "p", 5); return err }(), "limit: p: invalid argument: nil store"},
		{func() error { _, err := NewGCRA(c, "a b", 5, time.Second, 5); return err }(),
			"limit: a b: invalid argument: policy name \"a b\" is not a token (a letter or *, then letters, digits or :/!#$%&'*+-.^_`|~)"},
		{func() error { _, err := NewGCRA(c, "g", 0, time.Second, 5); return err }(), "limit: g: invalid argument: rate 0 is not within [1, 2^53]"},
		{func() error { _, err := NewGCRA(c, "g", -3, time.Second, 5); return err }(), "limit: g: invalid argument: rate -3 is not within [1, 2^53]"},
		{func() error { _, err := NewGCRA(c, "g", 5, 0, 5); return err }(),
			"limit: g: invalid argument: period 0s is not a positive whole number of milliseconds"},
		{func() error { _, err := NewGCRA(c, "g", 5, -time.Second, 5); return err }(),
			"limit: g: invalid argument: period -1s is not a positive whole number of milliseconds"},
		{func() error { _, err := NewGCRA(c, "g", 5, 1500*time.Microsecond, 5); return err }(),
			"limit: g: invalid argument: period 1.5ms is not a positive whole number of milliseconds"},
		{func() error { _, err := NewGCRA(c, "g", 5, time.Second, 0); return err }(),
			"limit: g: invalid argument: burst 0 is not within [1, 4503599627370] (2^52 / the period in ms)"},
		{func() error { _, err := NewGCRA(c, "g", 5, time.Hour, 2_000_000_000); return err }(),
			"limit: g: invalid argument: burst 2000000000 is not within [1, 1250999896] (2^52 / the period in ms)"},
		{func() error { _, err := NewGCRA(nil, "g", 5, time.Second, 5); return err }(), "limit: g: invalid argument: nil client"},
		{func() error { _, err := NewGCRA(c, "g", 5, time.Second, 5, WithPrefix("a}")); return err }(),
			"limit: g: invalid argument: prefix or suffix \"a}\" contains a brace"},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, store.ErrInvalid) || tt.err.Error() != tt.want {
			t.Errorf("got %v\nwant %s", tt.err, tt.want)
		}
	}
}

// TestTokens checks the keys and arguments of the Log and FixedWindow
// scripts, and the call errors, without a server.
func TestTokens(t *testing.T) {
	c, rec := resptest.Client(t, func([]string) string {
		return resptest.Arr(resptest.Int(1), resptest.Int(1), resptest.Int(0), resptest.Int(60000))
	})
	lg, err := NewLog(c, "perminute", 5, time.Minute, WithPrefix("rl:"))
	if err != nil {
		t.Fatal(err)
	}
	fx, err := NewFixedWindow(c, "perhour", 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1700000000123)
	ctx := context.Background()
	if d, err := lg.AllowAt(ctx, at, "{ip}:1.2.3.4", 1); err != nil || !d.Allowed || d.Remaining != 4 {
		t.Fatal(d, err)
	}
	if _, err := fx.Allow(ctx, "u", 3); err != nil {
		t.Fatal(err)
	}
	cmds := rec.Commands()
	if len(cmds) != 2 {
		t.Fatal(cmds)
	}
	if got := cmds[0][2:7]; !slices.Equal(got, []string{"1", "rl:{%7Bip%7D:1.2.3.4}:perminute", "1700000000123", "60000", "5"}) ||
		cmds[0][0] != "FCALL" || cmds[0][1] != limitlua.Log.Function() || cmds[0][7] != "1" || !strings.HasSuffix(cmds[0][8], ":") {
		t.Errorf("log sent %q", cmds[0])
	}
	if got := cmds[1][2:8]; !slices.Equal(got, []string{"1", "rl:{u}:perhour", "", "3600000", "100", "3"}) || cmds[1][1] != limitlua.Fixed.Function() {
		t.Errorf("fixed window sent %q", cmds[1])
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := lg.Allow(ctx, "", 1); return err }(), `limit: perminute: invalid argument: empty key`},
		{func() error { _, err := lg.Allow(ctx, "k", maxLogCost+1); return err }(), `limit: perminute "k": invalid argument: cost 1001 is not within [0, 1000]`},
		{func() error { _, err := Refund(ctx, lg, "k", 1); return err }(), `limit: perminute: invalid argument: only a GCRA limiter gives back a cost`},
		{func() error { _, err := Refund(ctx, shadow{lg}, "k", 1); return err }(), `limit: refund: invalid argument: only a GCRA limiter gives back a cost`},
	} {
		if !errors.Is(tc.err, store.ErrInvalid) || tc.err.Error() != tc.want {
			t.Errorf("got %v, want %s", tc.err, tc.want)
		}
	}
}

// TestGCRATokens checks the GCRA script's keys and arguments (the emission
// interval in lowest terms), its decisions and its call errors, without a
// server.
func TestGCRATokens(t *testing.T) {
	c, rec := resptest.Client(t, func([]string) string {
		// 7 of a burst of 10 used, a retry in 250 ms, all free in 2,334 ms.
		return resptest.Arr(resptest.Int(0), resptest.Int(7), resptest.Int(250), resptest.Int(2334))
	})
	l, err := NewGCRA(c, "persec", 3, time.Second, 10, WithPrefix("g:"))
	if err != nil {
		t.Fatal(err)
	}
	if p := l.Policy(); p != (Policy{Name: "persec", Limit: 3, Window: time.Second, Burst: 10, Algorithm: "gcra"}) {
		t.Errorf("policy %+v", p)
	}
	ctx := context.Background()
	d, err := l.AllowAt(ctx, time.UnixMilli(1700000000123), "{ip}:1.2.3.4", 4)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Decision{Allowed: false, Limit: 10, Remaining: 3, RetryAfter: 250 * time.Millisecond, ResetAfter: 2334 * time.Millisecond, Policy: "persec"}
	if d.Allowed != want.Allowed || d.Limit != want.Limit || d.Remaining != want.Remaining || d.RetryAfter != want.RetryAfter ||
		d.ResetAfter != want.ResetAfter || d.Policy != want.Policy {
		t.Errorf("decision %+v, want %+v", d, want)
	}
	hourly, err := NewGCRA(c, "perhour", 100, time.Hour, 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hourly.Allow(ctx, "u", 1); err != nil {
		t.Fatal(err)
	}
	cmds := rec.Commands()
	if len(cmds) != 2 {
		t.Fatal(cmds)
	}
	// 1000 ms / 3 = 1000/3; 3,600,000 ms / 100 = 36000/1. No nonce.
	if got := cmds[0][1:]; !slices.Equal(got, []string{limitlua.GCRA.Function(), "1", "g:{%7Bip%7D:1.2.3.4}:persec", "1700000000123", "1000", "3", "10", "4"}) {
		t.Errorf("sent %q", cmds[0])
	}
	if got := cmds[1][1:]; !slices.Equal(got, []string{limitlua.GCRA.Function(), "1", "rl:{u}:perhour", "", "36000", "1", "20", "1"}) {
		t.Errorf("sent %q", cmds[1])
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := l.Allow(ctx, "", 1); return err }(), `limit: persec: invalid argument: empty key`},
		{func() error { _, err := l.Allow(ctx, "k", -1); return err }(), `limit: persec "k": invalid argument: cost -1 is not within [0, 9007199254740992]`},
	} {
		if !errors.Is(tc.err, store.ErrInvalid) || tc.err.Error() != tc.want {
			t.Errorf("got %v, want %s", tc.err, tc.want)
		}
	}
}

// TestACLRules: the README's rules for each limiter allow
// every command their scripts call, and nothing they do not.
func TestACLRules(t *testing.T) {
	rules := acldoc.Parse(limitlua.ACL...)
	for label, s := range map[string]*backend.Script{"log": limitlua.Log, "fixed window": limitlua.Fixed, "gcra": limitlua.GCRA, "windows": limitlua.Windows} {
		if err := acldoc.Check(rules, label, nil, s); err != nil {
			t.Error(err)
		}
	}
}

// TestShadow: a shadow limiter admits what its limiter refuses, with
// WouldRefuse and the refusal's figures, and passes admissions as they are.
func TestShadow(t *testing.T) {
	refuse := true
	c, _ := resptest.Client(t, func([]string) string {
		if refuse {
			return resptest.Arr(resptest.Int(0), resptest.Int(5), resptest.Int(1500), resptest.Int(4000))
		}
		return resptest.Arr(resptest.Int(1), resptest.Int(3), resptest.Int(0), resptest.Int(4000))
	})
	l, err := NewFixedWindow(c, "p", 5, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := Shadow(l)
	if Shadow(s) != s || Shadow(nil) != nil || s.Policy() != l.Policy() {
		t.Fatal("Shadow of a shadow, of nil, or its policy")
	}
	d, err := s.Allow(context.Background(), "k", 1)
	want := store.Decision{Allowed: true, WouldRefuse: true, Limit: 5, Sum: 5, RetryAfter: 1500 * time.Millisecond, ResetAfter: 4 * time.Second, Policy: "p"}
	if err != nil || !reflect.DeepEqual(d, want) {
		t.Fatalf("got %+v %v, want %+v", d, err, want)
	}
	refuse = false
	d, err = s.AllowAt(context.Background(), time.Now(), "k", 1)
	want = store.Decision{Allowed: true, Limit: 5, Sum: 3, Remaining: 2, ResetAfter: 4 * time.Second, Policy: "p"}
	if err != nil || !reflect.DeepEqual(d, want) {
		t.Fatalf("got %+v %v, want %+v", d, err, want)
	}
}

// TestFunctions: a limiter runs its script as a function (FCALL); a library
// the server lacks is loaded and the call sent again; a server that refuses
// FCALL (an ACL without the functions rule) gets EVALSHA from then on.
func TestFunctions(t *testing.T) {
	ok := resptest.Arr(resptest.Int(1), resptest.Int(1), resptest.Int(0), resptest.Int(60000))
	for _, tt := range []struct {
		name  string
		fcall string // the reply to the first FCALL
		want  []string
	}{
		{"loaded", ok, []string{"FCALL", "FCALL"}},
		{"missing", resptest.Err("ERR Function not found"), []string{"FCALL", "FUNCTION", "FCALL", "FCALL"}},
		{"refused", resptest.Err("NOPERM User u has no permissions to run the 'fcall' command"), []string{"FCALL", "EVALSHA", "EVALSHA"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fcalls := 0
			c, rec := resptest.Client(t, func(cmd []string) string {
				switch cmd[0] {
				case "FCALL":
					if fcalls++; fcalls == 1 {
						return tt.fcall
					}
				case "FUNCTION":
					return resptest.Str(limitlua.Log.Library().Name())
				}
				return ok
			})
			lg, err := NewLog(c, "perminute", 5, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if d, err := lg.Allow(context.Background(), "k", 1); err != nil || !d.Allowed {
					t.Fatal(d, err)
				}
			}
			var got []string
			for _, c := range rec.Commands() {
				got = append(got, c[0])
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("sent %v, want %v", got, tt.want)
			}
		})
	}
}
