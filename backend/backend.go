// Package backend is the contract between package store and the server-side
// backends (packages nativehash and tairhash).
//
// A backend is a set of Lua scripts, one per operation, that all take the same
// keys and arguments and answer in the same shape, so that store has one code
// path for every server. The scripts share one Lua library (the clock, live
// ranges, classification, retry-after); a backend supplies only the six small
// Lua functions that touch its data type (see [Ops]).
//
// Most users never import this package: store picks the backend.
package backend

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// Prims is the Lua a backend supplies to touch its data type. It must define
// these local functions:
//
//	ws_read(key)               -> flat {field, value, ...} of the counter
//	ws_incr(L, key, delta)     -> add delta (a string) to bucket L.field and make it
//	                              expire at ws_expiry(L, L.cstart + L.w); write
//	                              nothing if the increment fails
//	ws_drop(key, fields)       -> delete the given fields
//	ws_ttls(key, fields, pttl) -> each field's remaining life in ms (-1: none)
type Prims string

// Ops is the Lua that defines a backend's four operations, after its Prims and
// the shared scan-based operations:
//
//	ws_add(L, key, delta)         -> the new window sum (number or decimal string)
//	ws_addnosum(L, key, delta)    -> 1
//	ws_allow(L, key, limit, cost) -> {allowed, sum, retry ms, reset ms}
//	ws_sum(L, key)                -> the sum over L.lb; must not write
//
// ScanOps binds them to the shared ones that read the whole counter.
type Ops string

// Backend is one way of keeping counters on a server. Its zero value is not
// usable; backends come from New. A Backend is immutable and safe for
// concurrent use.
type Backend struct {
	// Name is the backend's name: "nativehash" or "tairhash".
	Name string
	// FieldTTL reports whether buckets expire on their own (per-field TTL),
	// rather than being deleted by the scripts.
	FieldTTL bool

	// Write runs a batch of Add, AddNoSum and Allow operations on many keys
	// (OpAdd...); Sum answers the sums of many keys; both answer with one
	// entry per key. Sum and Inspect (one key) are read-only. See the
	// argument layout at Args.
	Write, Sum, Inspect *Script
}

// New builds a backend from its Lua primitives and operations.
func New(name string, fieldTTL bool, prims Prims, ops Ops) *Backend {
	lib := prelude + string(prims) + scanLib + string(ops)
	return &Backend{
		Name:     name,
		FieldTTL: fieldTTL,
		Write:    NewScript(lib+bodyWrite, false),
		Sum:      NewScript(lib+bodySum, true),
		Inspect:  NewScript(lib+bodyInspect, true),
	}
}

// The operation codes of a Write batch.
const (
	OpAdd      = "a" // delta: Add
	OpAddNoSum = "n" // delta: AddNoSum
	OpAllow    = "w" // limit, cost: Allow
)

// Clock is the clock argument of Args. ServerClock makes the scripts read the
// server's TIME.
type Clock struct {
	ms     int64
	client bool
}

// ServerClock makes a script use the server's clock.
var ServerClock = Clock{}

// ClientClock makes a script use the given instant, in Unix ms.
func ClientClock(unixMs int64) Clock { return Clock{ms: unixMs, client: true} }

// Arg is the clock as a script argument, as ws_clock in ClockLua reads it: the
// Unix ms of a client clock, or "" for the server's.
func (c Clock) Arg() string {
	if !c.client {
		return ""
	}
	return strconv.FormatInt(c.ms, 10)
}

// Args builds a script's arguments. The layout is:
//
//	1 clock (Unix ms, or "" for the server's TIME)
//	2 bucket ms   3 window ms   4 lookback ms
//	5..9 the starts of the five years around now (fieldcodec.Codec.YearStarts)
//	10.. extra: Write: per operation, its code (OpAdd...) and arguments;
//	     Sum and Inspect: none
func Args(clock Clock, bucketMs, windowMs, lookbackMs int64, years [5]int64, extra ...string) []string {
	a := make([]string, 9, 9+len(extra))
	a[0] = clock.Arg()
	a[1] = strconv.FormatInt(bucketMs, 10)
	a[2] = strconv.FormatInt(windowMs, 10)
	a[3] = strconv.FormatInt(lookbackMs, 10)
	for i, y := range years {
		a[4+i] = strconv.FormatInt(y, 10)
	}
	return append(a, extra...)
}

// ArgsCache builds the same arguments as Args, reusing the decimal strings of
// the parts that rarely change (bucket, window, lookback, years): formatting
// them on every call is a measurable share of a call's client CPU. The zero
// value is ready to use; it is safe for concurrent use.
type ArgsCache struct {
	last atomic.Pointer[argsEntry]
}

type argsEntry struct {
	bucketMs, windowMs, lookbackMs int64
	years                          [5]int64
	server                         []string // ARGV 1..9 with the server clock
}

// Build returns Args(clock, bucketMs, windowMs, lookbackMs, years, extra...).
func (c *ArgsCache) Build(clock Clock, bucketMs, windowMs, lookbackMs int64, years [5]int64, extra ...string) []string {
	hdr := c.Header(clock, bucketMs, windowMs, lookbackMs, years)
	a := make([]string, 9, 9+len(extra))
	copy(a, hdr)
	return append(a, extra...)
}

// Header returns ARGV 1..9 of Args, without the extra arguments. With the
// server clock it returns the same slice for the same arguments, until they
// change, so that callers can tell by identity which calls share a header. The
// slice must not be modified.
func (c *ArgsCache) Header(clock Clock, bucketMs, windowMs, lookbackMs int64, years [5]int64) []string {
	e := c.last.Load()
	if e == nil || e.bucketMs != bucketMs || e.windowMs != windowMs || e.lookbackMs != lookbackMs || e.years != years {
		e = &argsEntry{bucketMs: bucketMs, windowMs: windowMs, lookbackMs: lookbackMs, years: years,
			server: Args(ServerClock, bucketMs, windowMs, lookbackMs, years)}
		c.last.Store(e)
	}
	if !clock.client {
		return e.server
	}
	a := make([]string, 9)
	copy(a, e.server)
	a[0] = clock.Arg()
	return a
}

// Script is a Lua script run with EVALSHA, falling back to EVAL when the server
// does not have it cached (NOSCRIPT), through rueidis.Lua. It is safe for
// concurrent use.
type Script struct {
	lua      *rueidis.Lua
	src, sha string
	readOnly bool
}

// NewScript wraps src. A read-only script runs with EVALSHA_RO / EVAL_RO, so a
// replica can serve it.
func NewScript(src string, readOnly bool) *Script {
	s := &Script{src: src, readOnly: readOnly}
	if readOnly {
		s.lua = rueidis.NewLuaScriptReadOnly(src)
	} else {
		s.lua = rueidis.NewLuaScript(src)
	}
	s.sha = sha1Hex(src)
	return s
}

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src }

// SHA1 returns the script's SHA-1, as SCRIPT LOAD would answer it.
func (s *Script) SHA1() string { return s.sha }

// Exec runs the script on one key: one round trip, or two the first time a
// server sees the script.
func (s *Script) Exec(ctx context.Context, c rueidis.Client, key string, args []string) rueidis.RedisResult {
	return s.lua.Exec(ctx, c, []string{key}, args)
}

// Call is one run of a script in ExecMulti.
type Call struct {
	Keys []string
	Args []string
}

// ExecMulti runs the script once per call in one pipelined batch (on a cluster
// client, one batch per node, sent in parallel). Calls that meet a server that
// lacks the script are sent again, as EVAL, in a second batch; so a warm server
// costs one round trip. Unlike rueidis.Lua.ExecMulti it does not SCRIPT LOAD on
// every node first.
func (s *Script) ExecMulti(ctx context.Context, c rueidis.Client, calls []Call) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(calls))
	for i, k := range calls {
		cmds[i] = s.evalsha(c, k)
	}
	res := c.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range res {
		if e, ok := rueidis.IsRedisErr(r.Error()); ok && e.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res
	}
	cmds = cmds[:0]
	for _, i := range again {
		cmds = append(cmds, s.eval(c, calls[i]))
	}
	for j, r := range c.DoMulti(ctx, cmds...) {
		res[again[j]] = r
	}
	return res
}

func (s *Script) evalsha(c rueidis.Client, k Call) rueidis.Completed {
	if s.readOnly {
		return c.B().EvalshaRo().Sha1(s.sha).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
	}
	return c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
}

func (s *Script) eval(c rueidis.Client, k Call) rueidis.Completed {
	if s.readOnly {
		return c.B().EvalRo().Script(s.src).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
	}
	return c.B().Eval().Script(s.src).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
}
