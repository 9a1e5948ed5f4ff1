package limit

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/limitlua"
	"github.com/windowstore/windowstore/internal/resptest"
	"github.com/windowstore/windowstore/store"
)

func windowRules() []WindowLimit {
	return []WindowLimit{
		{Name: "persec", Limit: 5, Window: store.Window{Length: 10 * time.Second, Bucket: time.Second}},
		{Name: "perhour", Limit: 100, Window: store.Window{Length: time.Hour, Bucket: time.Minute}},
	}
}

func TestWindowsErrors(t *testing.T) {
	c, _ := resptest.Client(t, nil)
	w := func(l int64, d time.Duration) WindowLimit {
		return WindowLimit{Name: "r", Limit: l, Window: store.Window{Length: d, Bucket: time.Second}}
	}
	two := func(a, b WindowLimit) []WindowLimit { return []WindowLimit{a, b} }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := NewWindows(c, "w", nil); return err }(), "limit: w: invalid argument: 0 rules: not within [1, 16]"},
		{func() error { _, err := NewWindows(c, "w", make([]WindowLimit, 17)); return err }(), "limit: w: invalid argument: 17 rules: not within [1, 16]"},
		{func() error { _, err := NewWindows(nil, "w", windowRules()); return err }(), "limit: w: invalid argument: nil client"},
		{func() error { _, err := NewWindows(c, "1w", windowRules()); return err }(),
			"limit: 1w: invalid argument: policy name \"1w\" is not a token (a letter or *, then letters, digits or :/!#$%&'*+-.^_`|~)"},
		{func() error { _, err := NewWindows(c, "w", []WindowLimit{w(-1, time.Minute)}); return err }(),
			"limit: r: invalid argument: limit -1 is not within [0, 2^51]"},
		{func() error { _, err := NewWindows(c, "w", []WindowLimit{w(1<<51+1, time.Minute)}); return err }(),
			"limit: r: invalid argument: limit 2251799813685249 is not within [0, 2^51]"},
		{func() error { _, err := NewWindows(c, "w", []WindowLimit{w(1, 1500*time.Millisecond)}); return err }(),
			"limit: r: invalid argument: window 1.5s/1s: bucket 1s does not divide window 1.5s"},
		{func() error { _, err := NewWindows(c, "w", two(w(1, time.Minute), w(2, time.Hour))); return err }(),
			"limit: r: invalid argument: two rules of one name"},
		{func() error {
			a := w(1, time.Minute)
			b := a
			b.Name = "s"
			_, err := NewWindows(c, "w", two(a, b))
			return err
		}(), "limit: s: invalid argument: two rules of one window (1m0s/1s)"},
		{func() error { _, err := NewWindows(c, "w", windowRules(), WithInstances(2)); return err }(),
			"limit: w: invalid argument: a Degrade option (WithInstances...) configures Degrade, not a limiter"},
		{func() error {
			l, _ := NewWindows(c, "w", windowRules())
			_, err := l.Allow(context.Background(), "k", 1<<51+1)
			return err
		}(), `limit: w "k": invalid argument: cost 2251799813685249 is not within [0, 2251799813685248]`},
		{func() error {
			l, _ := NewWindows(c, "w", windowRules())
			_, err := l.Allow(context.Background(), "", 1)
			return err
		}(), `limit: w: invalid argument: empty key`},
	} {
		if !errors.Is(tc.err, store.ErrInvalid) || tc.err.Error() != tc.want {
			t.Errorf("got %v\nwant %s", tc.err, tc.want)
		}
	}
}

// TestWindowsTokens checks the windows script's keys and arguments, and how
// its reply becomes a Decision, without a server.
func TestWindowsTokens(t *testing.T) {
	var reply string
	c, rec := resptest.Client(t, func([]string) string { return resptest.Arr(reply) })
	l, err := NewWindows(c, "login", windowRules(), WithPrefix("x:"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.UnixMilli(1700000000123)
	// Admitted: sums 5 and 40, the newest count now.
	reply = resptest.Arr(resptest.Int(1), resptest.Int(1700000000123), resptest.Int(1700000000123), resptest.Int(5), resptest.Int(40))
	d, err := l.AllowAt(ctx, at, "{u}", 2)
	if err != nil {
		t.Fatal(err)
	}
	cmds := rec.Commands()
	want := []string{"FCALL", limitlua.Windows.Function(), "2", "x:{%7Bu%7D}:login:10s/1s+1h/1m", "x:{%7Bu%7D}:login:10s/1s+1h/1m:2",
		"1700000000123", "900000", "2", "1000", "10", "5", "m1", "v1", "60000", "60", "100", "m2", "v2", "2"}
	if len(cmds) != 1 || !slices.Equal(cmds[0], want) {
		t.Fatalf("sent %q\nwant %q", cmds, want)
	}
	// The first has the least remaining (0); each resets when the newest
	// count's bucket leaves: 10 s and 60 min from its bucket's start, 123 ms in.
	persec := store.Decision{Allowed: true, Limit: 5, Sum: 5, Remaining: 0, ResetAfter: 9877 * time.Millisecond, Policy: "persec"}
	perhour := store.Decision{Allowed: true, Limit: 100, Sum: 40, Remaining: 60, ResetAfter: time.Hour - 20123*time.Millisecond, Policy: "perhour"}
	top := persec
	top.Policies = []store.Decision{persec, perhour}
	if !equalDecision(d, top) {
		t.Errorf("admitted: %+v", d)
	}
	// Refused by both, with equal retries: the first decides; then by both,
	// one never (-1): that one decides.
	for _, tc := range []struct {
		r1, r2 int64
		policy string
		retry  time.Duration
	}{{3000, 3000, "persec", 3 * time.Second}, {3000, -1, "perhour", -1}, {-1, -1, "persec", -1}, {0, 500, "perhour", 500 * time.Millisecond}} {
		reply = resptest.Arr(resptest.Int(0), resptest.Int(1700000000123), resptest.Int(1700000000000), resptest.Int(5), resptest.Int(100),
			resptest.Int(tc.r1), resptest.Int(tc.r2))
		d, err := l.AllowAt(ctx, at, "u", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Policy != tc.policy || d.RetryAfter != tc.retry || d.Policies[0].Allowed != (tc.r1 == 0) {
			t.Errorf("refused with retries %d, %d: %+v", tc.r1, tc.r2, d)
		}
	}
	reply = resptest.Err("WRONGTYPE windowstore: the key does not hold a windows limiter state")
	if _, err := l.Allow(ctx, "u", 1); err == nil || !errors.Is(err, store.ErrWrongType) {
		t.Errorf("wrong type: %v", err)
	}
	if p := l.Policy(); p.Name != "perhour" { // 100 per hour is less per unit of time than 5 per 10 s
		t.Errorf("the tightest policy is %+v", p)
	}
}

func equalDecision(a, b store.Decision) bool { return reflect.DeepEqual(a, b) }

// TestFloorDiv: a bucket's index rounds down, as the script's math.floor,
// before 1970 too (a decision's reset is computed from it).
func TestFloorDiv(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{{7, 2, 3}, {6, 2, 3}, {0, 5, 0}, {-1, 1000, -1}, {-1000, 1000, -1}, {-1001, 1000, -2}} {
		if got := floorDiv(tc.a, tc.b); got != tc.want {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
