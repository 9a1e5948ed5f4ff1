package batch

import (
	"context"
	"slices"
	"testing"

	"github.com/windowstore/windowstore/internal/resptest"
)

// TestFlatStopsAfterError: a reply that stops after an operation's error
// gives that error to the operations after it (the script ran none of
// them); one that stops otherwise is short.
func TestFlatStopsAfterError(t *testing.T) {
	replies := map[string]string{
		"stops":  resptest.Arr(resptest.Int(1), resptest.Int(5), resptest.Int(-1), resptest.Err("WSARGS bad")),
		"short":  resptest.Arr(resptest.Int(1), resptest.Int(5)),
		"middle": resptest.Arr(resptest.Int(-1), resptest.Err("WSARGS bad"), resptest.Int(1), resptest.Int(7), resptest.Int(1), resptest.Int(8)),
	}
	c, _ := resptest.Client(t, func(cmd []string) string { return replies[cmd[0]] })
	split := func(name string) ([][]string, error) {
		vals, err := c.Do(context.Background(), c.B().Arbitrary(name).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		out, err := flat(vals, 3)
		var s [][]string
		for _, op := range out {
			var o []string
			for _, v := range op {
				if e := v.Error(); e != nil {
					o = append(o, "err: "+e.Error())
				} else {
					n, _ := v.AsInt64()
					o = append(o, string(rune('0'+n)))
				}
			}
			s = append(s, o)
		}
		return s, err
	}
	if s, err := split("stops"); err != nil || len(s) != 3 || s[0][0] != "5" || s[1][0] != "err: WSARGS bad" || s[2][0] != "err: WSARGS bad" {
		t.Errorf("stops: %v, %v", s, err)
	}
	if _, err := split("short"); err != errShortReply {
		t.Errorf("short: %v, want errShortReply", err)
	}
	if s, err := split("middle"); err != nil || s[0][0] != "err: WSARGS bad" || s[1][0] != "7" || s[2][0] != "8" {
		t.Errorf("middle: %v, %v", s, err)
	}
}

// TestAppendRuns: operations with equal arguments, one after another, go as
// one run ("*r", then their arguments once); one alone goes as it is.
func TestAppendRuns(t *testing.T) {
	op := func(args ...string) *Op { return &Op{args: args} }
	got := appendRuns([]string{"hdr"}, []*Op{op("s", "10"), op("s", "10"), op("s", "10"), op("s", "5"), op("t", "5"), op("t", "5"), op("s", "10")})
	want := []string{"hdr", "*3", "s", "10", "s", "5", "*2", "t", "5", "s", "10"}
	if !slices.Equal(got, want) {
		t.Fatalf("appendRuns = %q, want %q", got, want)
	}
}
