package store

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/resptest"
	_ "github.com/windowstore/windowstore/nativehash"
)

// These tests check the exact command tokens the store sends, without a
// server. They prove the wire format, not behaviour: behaviour is proven by
// the integration suite on real servers.

// ck is the keys of the plain hash's counter of key key of a 10s/1s store
// under the default prefix, as its scripts take them: its hash and its head.
func ck(key string) []string { return []string{"ws:{" + key + "}:10s/1s:b", "ws:{" + key + "}:h"} }

// detectReply answers Detect's three commands like a Redis 8 (fieldTTL) or
// 7.0 server.
func detectReply(fieldTTL bool) func(cmd []string) (string, bool) {
	return func(cmd []string) (string, bool) {
		switch cmd[0] {
		case "INFO":
			return resptest.Str("# Server\r\nredis_version:8.0.2\r\n"), true
		case "COMMAND":
			var out []string
			for _, c := range cmd[2:] {
				if c == "hincrby" || (fieldTTL && c == "hpexpireat") {
					out = append(out, resptest.Arr(resptest.Str(c)))
				} else {
					out = append(out, resptest.Nil())
				}
			}
			return resptest.Arr(out...), true
		case "MODULE":
			return resptest.Arr(), true
		}
		return "", false
	}
}

func tokenStore(t *testing.T, fieldTTL bool, reply resptest.Reply, opts ...Option) (*Store, *resptest.Conn) {
	det := detectReply(fieldTTL)
	c, rec := resptest.Client(t, func(cmd []string) string {
		if r, ok := det(cmd); ok {
			return r
		}
		return reply(cmd)
	})
	s, err := New(context.Background(), c, Window{Length: 10 * time.Second, Bucket: time.Second}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, rec
}

// years is a header's second entry at at (backend.Header): the five years'
// starts and the future tolerance futureMs, without a trace.
func years(at time.Time, futureMs string) string {
	c, _ := codec.New(time.Second, nil)
	var out []string
	for _, y := range c.YearStarts(at) {
		out = append(out, strconv.FormatInt(y, 10))
	}
	return strings.Join(append(out, futureMs), " ")
}

// scriptCalls returns the script and function calls and loads sent, without
// detection.
func scriptCalls(rec *resptest.Conn) [][]string {
	var out [][]string
	for _, c := range rec.Commands() {
		switch c[0] {
		case "EVALSHA", "EVALSHA_RO", "EVAL", "EVAL_RO", "FCALL", "FCALL_RO", "FUNCTION":
			out = append(out, c)
		}
	}
	return out
}

func TestTokensDetect(t *testing.T) {
	s, rec := tokenStore(t, true, nil)
	if s.Detection().Backend != "nativehash-fieldttl" || s.Detection().Version != "8.0.2" {
		t.Fatalf("%+v", s.Detection())
	}
	want := [][]string{{"INFO", "server"}, {"COMMAND", "INFO", "exhincrby", "exhpexpireat", "hincrby", "hpexpireat"}, {"MODULE", "LIST"}}
	if got := rec.Commands(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("detect sent %q, want %q", got, want)
	}
}

func TestTokensAddServerClock(t *testing.T) {
	s, rec := tokenStore(t, false, func([]string) string { return resptest.Arr(resptest.Int(1), resptest.Int(3)) }, WithPrefix("p:"))
	n, err := s.Add(context.Background(), "user:42", -7)
	if err != nil || n != 3 {
		t.Fatal(n, err)
	}
	want := []string{"FCALL", backend.Named(backend.NamePlain).Write.Function(), "2", "p:{user:42}:10s/1s:b", "p:{user:42}:h", "",
		years(time.Now(), "5000"), backend.OpAdd, "1000:10000", "-7"}
	if got := scriptCalls(rec); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Fatalf("sent %q\nwant %q", got, want)
	}
}

func TestTokensAllowClientClock(t *testing.T) {
	s, rec := tokenStore(t, true, func([]string) string {
		return resptest.Arr(resptest.Int(4), resptest.Int(0), resptest.Int(4), resptest.Int(1500), resptest.Int(9000))
	}, WithFutureTolerance(time.Second), withFunctions(false))
	at := time.Date(2024, 12, 31, 23, 59, 59, 500e6, time.UTC)
	r, err := s.At(at).Allow(context.Background(), "k", 5, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allowed || r.Limit != 5 || r.Sum != 4 || r.Remaining != 1 || r.RetryAfter != 1500*time.Millisecond ||
		r.ResetAfter != 9*time.Second || r.Duplicate || r.Policies != nil {
		t.Fatalf("%+v", r)
	}
	want := []string{"EVALSHA", backend.Named(backend.NameFieldTTL).Write.SHA1(), "1", "ws:{k}:10s/1s", strconv.FormatInt(at.UnixMilli(), 10),
		years(at, "1000"), backend.OpAllow, "1000:10000", "5", "2"}
	if got := scriptCalls(rec); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Fatalf("sent %q\nwant %q", got, want)
	}
}

// TestTokensBatch: writes queued while a script call is in flight go out
// together, as one FCALL over their keys, each with its own operation, and
// each caller gets its own answer (an error for one does not fail the other).
func TestTokensBatch(t *testing.T) {
	inFlight, release := make(chan struct{}), make(chan struct{})
	var calls int
	var mu sync.Mutex
	s, rec := tokenStore(t, false, func(cmd []string) string {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			close(inFlight)
			<-release
			return resptest.Arr(resptest.Int(1), resptest.Int(1))
		}
		return resptest.Arr(resptest.Int(-1), resptest.Err("WRONGTYPE Operation against a key holding the wrong kind of value"),
			resptest.Int(4), resptest.Int(1), resptest.Int(3), resptest.Int(0), resptest.Int(10000))
	}, WithBatching(64, 1))
	ctx := context.Background()
	done := make(chan error, 3)
	go func() { _, err := s.Add(ctx, "a", 1); done <- err }()
	<-inFlight
	var wrong error
	var allowed Decision
	// b, then c, queue behind a: wait until each is in the queue.
	queued := func(n int) {
		for {
			if s.writes.Queued() == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	go func() { _, wrong = s.Record(ctx, Event{Key: "b", Delta: 2, NoSum: true}); done <- nil }()
	queued(1)
	go func() { var err error; allowed, err = s.Allow(ctx, "c", 10, 3); done <- err }()
	queued(2)
	close(release)
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(wrong, ErrWrongType) || wrong.Error() != `store: add "b": key holds a value that is not a counter` {
		t.Fatalf("wrong type: %v", wrong)
	}
	if !allowed.Allowed || allowed.Sum != 3 {
		t.Fatalf("%+v", allowed)
	}
	got := scriptCalls(rec)
	hdr := []string{"", years(time.Now(), "5000")}
	want := append(append([]string{"FCALL", backend.Named(backend.NamePlain).Write.Function(), "4", "ws:{b}:10s/1s:b", "ws:{b}:h",
		"ws:{c}:10s/1s:b", "ws:{c}:h"}, hdr...),
		backend.OpAddNoSum, "1000:10000", "2", backend.OpAllow, "1000:10000", "10", "3")
	if len(got) != 2 || !slices.Equal(got[1], want) {
		t.Fatalf("sent %q\nwant %q", got, want)
	}
}

// TestTokensApplyBatch: the batches of an Apply queue behind a script call
// in flight as one write does, and share the next calls with other callers'
// writes; a flush of the queue never parts them (with 2 operations per call,
// the Apply's second batch goes in a call of its own, in the same flush, not
// beside the write queued after it). Each caller gets its own answers.
func TestTokensApplyBatch(t *testing.T) {
	inFlight, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var calls [][]string // each call's keys
	s, _ := tokenStore(t, false, func(cmd []string) string {
		n, _ := strconv.Atoi(cmd[2])
		keys := cmd[3 : 3+n]
		mu.Lock()
		calls = append(calls, keys)
		first := len(calls) == 1
		mu.Unlock()
		if first {
			close(inFlight)
			<-release
		}
		var out []string
		for _, k := range keys {
			if strings.HasSuffix(k, ":h") {
				continue // a counter's head: one reply per counter (its hash, then its head)
			}
			if k == "ws:{b}:10s/1s:b" || k == "ws:{c}:10s/1s:b" { // a group: flags, retry, then its one item
				out = append(out, resptest.Int(4), resptest.Int(1), resptest.Int(0), resptest.Int(1), resptest.Int(int64(k[4])))
			} else {
				out = append(out, resptest.Int(1), resptest.Int(int64(k[4])))
			}
		}
		return resptest.Arr(out...)
	}, WithBatching(2, 1))
	ctx := context.Background()
	queued := func(n int) {
		for end := time.Now().Add(5 * time.Second); s.writes.Queued() != n; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				close(release)
				t.Fatalf("%d writes queued, want %d", s.writes.Queued(), n)
			}
		}
	}
	sums := make(map[string]int64)
	var smu sync.Mutex
	add := func(k string, done chan<- error) {
		n, err := s.Add(ctx, k, 1)
		smu.Lock()
		sums[k] = n
		smu.Unlock()
		done <- err
	}
	done := make(chan error, 4)
	go add("a", done)
	<-inFlight
	go add("x", done)
	queued(1)
	var res []BatchResult
	go func() {
		var err error
		res, err = Apply(ctx, Batch{Ops: []Op{{Store: s, Key: "b", Delta: 1}}}, Batch{Ops: []Op{{Store: s, Key: "c", Delta: 1}}})
		done <- err
	}()
	queued(3)
	go add("y", done)
	queued(4)
	close(release)
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	want := [][]string{ck("a"), append(ck("x"), ck("b")...), ck("c"), ck("y")}
	if !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
	if sums["a"] != 'a' || sums["x"] != 'x' || sums["y"] != 'y' || res[0].Values[0].Sum != 'b' || res[1].Values[0].Sum != 'c' {
		t.Fatalf("answers %v %+v", sums, res)
	}
}

// TestTokensQueuedCancel: writes whose context ends while they wait in the
// queue are dropped, never sent, and answer the context's error: a lone
// write, and an Apply's batches.
func TestTokensQueuedCancel(t *testing.T) {
	inFlight, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var calls [][]string
	s, _ := tokenStore(t, false, func(cmd []string) string {
		n, _ := strconv.Atoi(cmd[2])
		mu.Lock()
		calls = append(calls, cmd[3:3+n])
		first := len(calls) == 1
		mu.Unlock()
		if first {
			close(inFlight)
			<-release
		}
		return resptest.Arr(resptest.Int(1), resptest.Int(1))
	}, WithBatching(64, 1))
	go func() { _, _ = s.Add(context.Background(), "a", 1) }()
	<-inFlight
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { _, err := s.Add(ctx, "x", 1); errs <- err }()
	go func() {
		_, err := Apply(ctx, Batch{Ops: []Op{{Store: s, Key: "b", Delta: 1}}}, Batch{Ops: []Op{{Store: s, Key: "c", Delta: 1}}})
		errs <- err
	}()
	for end := time.Now().Add(5 * time.Second); s.writes.Queued() != 3; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d writes queued, want 3", s.writes.Queued())
		}
	}
	cancel()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled write answered %v", err)
		}
	}
	if n := s.writes.Queued(); n != 0 {
		t.Fatalf("%d writes still queued", n)
	}
	close(release)
	if _, err := s.Add(context.Background(), "z", 1); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := [][]string{ck("a"), ck("z")}; !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
}

// TestTokensSumManyLoad: one read-only function call over both keys; a
// server that lacks the library gets it (FUNCTION LOAD), then the call again.
func TestTokensSumManyLoad(t *testing.T) {
	loaded := false
	s, rec := tokenStore(t, false, func(cmd []string) string {
		switch {
		case cmd[0] == "FUNCTION":
			loaded = true
			return resptest.Str(backend.Named(backend.NamePlain).Library.Name())
		case cmd[0] == "FCALL_RO" && !loaded:
			return resptest.Err("ERR Function not found")
		}
		return resptest.Arr(resptest.Int(1), resptest.Str("9007199254740993"))
	})
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	sums, err := s.At(at).SumMany(context.Background(), []string{"a", "b"})
	if err != nil || !slices.Equal(sums, []int64{1, 1<<53 + 1}) {
		t.Fatal(sums, err)
	}
	args := []string{strconv.FormatInt(at.UnixMilli(), 10), years(at, "5000"), "*2", "1000:10000", "10000"} // a run of two sums (sum.lua)
	call := append(append([]string{"FCALL_RO", backend.Named(backend.NamePlain).Sum.Function(), "4"}, append(ck("a"), ck("b")...)...), args...)
	want := [][]string{call, {"FUNCTION", "LOAD", backend.Named(backend.NamePlain).Library.Source()}, call}
	if got := scriptCalls(rec); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("sent %q", got)
	}
}

// TestTokensFunctionsRefused: a user who may not FCALL gets EVALSHA from
// then on; a server that lacks the script gets it again as EVAL_RO.
func TestTokensFunctionsRefused(t *testing.T) {
	s, rec := tokenStore(t, false, func(cmd []string) string {
		switch cmd[0] {
		case "FCALL_RO":
			return resptest.Err("NOPERM User u has no permissions to run the 'fcall_ro' command")
		case "EVALSHA_RO":
			return resptest.Err("NOSCRIPT No matching script. Please use EVAL.")
		}
		return resptest.Arr(resptest.Int(1), resptest.Int(2))
	})
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for range 2 {
		sums, err := s.At(at).SumMany(context.Background(), []string{"a", "b"})
		if err != nil || !slices.Equal(sums, []int64{1, 2}) {
			t.Fatal(sums, err)
		}
	}
	var kinds []string
	for _, c := range scriptCalls(rec) {
		kinds = append(kinds, c[0])
	}
	if want := []string{"FCALL_RO", "EVALSHA_RO", "EVAL_RO", "EVALSHA_RO", "EVAL_RO"}; !slices.Equal(kinds, want) {
		t.Fatalf("sent %q, want %q", kinds, want)
	}
	if s.runner.Functions() {
		t.Fatal("the store still runs functions")
	}
}

// TestTokensErrorsLeakNothing: a script's error reply reaches the caller as
// one clean sentence; its SHA and Lua line stay reachable with errors.As.
func TestTokensErrorsLeakNothing(t *testing.T) {
	lib := backend.Named(backend.NamePlain).Library
	line := strings.Count(lib.Source()[:strings.Index(lib.Source(), "-- @file backend/lua/decide.lua")], "\n") + 5
	for _, tc := range []struct {
		name, reply string
		opts        []Option
	}{
		{"function", "ERR user_function:" + strconv.Itoa(line) + ": attempt to compare nil with number script: " +
			backend.Named(backend.NamePlain).Write.Function() + ", on @user_function:" + strconv.Itoa(line) + ".", nil},
		{"script", "ERR user_script:200: attempt to compare nil with number script: " +
			backend.Named(backend.NamePlain).Write.SHA1() + ", on @user_script:200.", []Option{withFunctions(false)}},
	} {
		s, _ := tokenStore(t, false, func([]string) string { return resptest.Err(tc.reply) }, tc.opts...)
		_, err := s.Add(context.Background(), "k", 1)
		if err == nil || err.Error() != `store: add "k": ERR attempt to compare nil with number` {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var se *backend.ScriptError
		if !errors.As(err, &se) || se.Line == 0 || se.File == "" {
			t.Fatalf("%s: %+v", tc.name, se)
		}
		if tc.name == "function" && (se.Func != backend.Named(backend.NamePlain).Write.Function() || se.File != "backend/lua/decide.lua" || se.Line != 4) {
			t.Fatalf("%s: %+v", tc.name, se)
		}
		if tc.name == "script" && se.SHA != backend.Named(backend.NamePlain).Write.SHA1() {
			t.Fatalf("%s: %+v", tc.name, se)
		}
	}
}

// withFunctions is hook.WithFunctions inside the package.
func withFunctions(on bool) Option { return func(c *config) { c.functions = on } }

// TestTokensLink: on a server that is not a cluster, AllowAll on keys of two
// slots is one script call of one linked op carrying both groups; the
// script decides the event, and the group that would admit alone answers
// without its cost.
func TestTokensLink(t *testing.T) {
	s, rec := tokenStore(t, false, func(cmd []string) string {
		limit := func(sum, retry, refused int64) []string {
			return []string{resptest.Int(4), resptest.Int(sum), resptest.Int(retry), resptest.Int(10000), resptest.Int(refused)}
		}
		// One op: the link's reply, flat, one group after the other.
		vals := append([]string{resptest.Int(0), resptest.Int(0)}, limit(0, 0, 0)...)
		vals = append(append(vals, resptest.Int(0), resptest.Int(4000)), limit(5, 4000, 1)...)
		return resptest.Arr(append([]string{resptest.Int(int64(len(vals)))}, vals...)...)
	})
	d, err := AllowAll(context.Background(), 1, Quota{Store: s, Key: "a", Limit: 5}, Quota{Store: s, Key: "b", Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.RetryAfter != 4*time.Second || d.Policy != "b 10s/1s" {
		t.Fatalf("%+v", d)
	}
	if p := d.Policies[0]; !p.Allowed || p.Sum != 0 || p.Remaining != 5 {
		t.Fatalf("the admitting policy, its cost taken back: %+v", p)
	}
	got := scriptCalls(rec)
	hdr := []string{"", years(time.Now(), "5000")}
	group := []string{"1", "", "11000", "", backend.ItemLimit, "1000:10000", "5", "1"}
	want := append(append(append([]string{"FCALL", backend.Named(backend.NamePlain).Write.Function(), "4"}, append(ck("a"), ck("b")...)...), hdr...),
		backend.OpLink, "2")
	want = append(append(want, group...), group...)
	if len(got) != 1 || !slices.Equal(got[0], want) {
		t.Fatalf("sent %q\nwant %q", got, want)
	}
}

// TestTokensObserve: a statistic's write is one FCALL of the write script on
// the statistic's own key (its kind after the key, in the key's slot): an
// operation of its own with the direction and the amount, or with an event
// time a group of one extreme item (First and Last: ”, the event's time,
// which the group carries); its read is the read-only script with the
// direction for an argument.
func TestTokensObserve(t *testing.T) {
	s, rec := tokenStore(t, false, func(args []string) string {
		if args[0] == "FCALL_RO" {
			return resptest.Arr(resptest.Arr(resptest.Str("1764000000000"), resptest.Str("-9223372036854775808")))
		}
		if slices.Contains(args, backend.OpXAdd) {
			return resptest.Arr(resptest.Int(1), resptest.Str("9223372036854775807"))
		}
		return resptest.Arr(resptest.Int(5), resptest.Int(1), resptest.Int(0), resptest.Int(2), resptest.Int(1), resptest.Str("9223372036854775807"))
	}, WithPrefix("p:"))
	ctx := context.Background()
	v, err := s.RecordStat(ctx, StatEvent{Key: "card:1", Stat: StatMax, Value: math.MaxInt64})
	if err != nil || !v.OK || v.Value != math.MaxInt64 || v.Recent != nil {
		t.Fatal(v, err)
	}
	at := time.UnixMilli(1764000000000)
	if _, err := s.RecordStat(ctx, StatEvent{Key: "card:1", Stat: StatFirst, Time: at}); err != nil {
		t.Fatal(err)
	}
	r, err := s.ReadStat(ctx, "card:1", StatRecent)
	if err != nil || len(r.Recent) != 1 || r.Recent[0] != (Sample{At: 1764000000000, Value: math.MinInt64}) || r.Value != math.MinInt64 {
		t.Fatal(r, err)
	}
	calls := scriptCalls(rec)
	if len(calls) != 3 {
		t.Fatalf("sent %q", calls)
	}
	wantTail := [][]string{
		{"p:{card:1}:max:10s/1s", backend.OpXAdd, "1000:10000", backend.XMax, "9223372036854775807"},
		{"p:{card:1}:first:10s/1s", backend.OpGroup, "1", "", "11000", "1764000000000", backend.ItemExtreme, "1000:10000", backend.XMin, ""},
		{"p:{card:1}:recent:10s/1s", "1000:10000", backend.XRecent},
	}
	for i, c := range calls {
		if c[3] != wantTail[i][0] || !slices.Equal(c[len(c)-len(wantTail[i])+1:], wantTail[i][1:]) {
			t.Errorf("call %d: sent %q, want key %s and %q", i, c, wantTail[i][0], wantTail[i][1:])
		}
	}
	if calls[2][0] != "FCALL_RO" {
		t.Errorf("a read went out as %s", calls[2][0])
	}
}

// TestObserveResendable: only an observation that changes nothing when
// written twice is resent after a connection error.
func TestObserveResendable(t *testing.T) {
	at := time.UnixMilli(1764000000000)
	for _, c := range []struct {
		o    StatEvent
		want bool
	}{
		{StatEvent{Stat: StatMax}, true},
		{StatEvent{Stat: StatMin, Time: at}, true},
		{StatEvent{Stat: StatFirst}, false},
		{StatEvent{Stat: StatLast, Time: at}, true},
		{StatEvent{Stat: StatRecent}, false},
		{StatEvent{Stat: StatRecent, Time: at}, false},
	} {
		if got := resendable(c.o); got != c.want {
			t.Errorf("resendable(%v, time %v) = %v, want %v", c.o.Stat, !c.o.Time.IsZero(), got, c.want)
		}
	}
}

// TestTokensAllowAllOneKey: AllowAll of policies on one key (stores of one
// prefix, or Sub views) is one group, one item per limit, each counter's hash
// and head declared (the head once per counter).
func TestTokensAllowAllOneKey(t *testing.T) {
	ctx := context.Background()
	limit := func(sum, reset int64) []string {
		return []string{resptest.Int(4), resptest.Int(sum), resptest.Int(0), resptest.Int(reset), resptest.Int(0)}
	}
	s, rec := tokenStore(t, false, func([]string) string {
		vals := append(append([]string{resptest.Int(1), resptest.Int(0)}, limit(1, 9000)...), limit(1, 90000)...)
		return resptest.Arr(append([]string{resptest.Int(int64(len(vals)))}, vals...)...)
	})
	s2, err := New(ctx, s.client, Window{Length: 100 * time.Second, Bucket: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := AllowAll(ctx, 1, Quota{Store: s, Key: "u", Limit: 5}, Quota{Store: s2, Key: "u", Limit: 50})
	if err != nil || !d.Allowed || d.Policies[1].Sum != 1 || d.Policies[1].Remaining != 49 {
		t.Fatalf("%+v %v", d, err)
	}
	hdr := []string{"", years(time.Now(), "5000")}
	want := append([]string{"FCALL", backend.Named(backend.NamePlain).Write.Function(), "4",
		"ws:{u}:10s/1s:b", "ws:{u}:h", "ws:{u}:100s/10s:b", "ws:{u}:h"}, hdr...)
	want = append(want, backend.OpLimits, "1000:10000 5 1 10000:100000 50 1")
	got := scriptCalls(rec)
	if len(got) != 1 || !slices.Equal(got[0], want) {
		t.Fatalf("sent %q\nwant %q", got, want)
	}
}
