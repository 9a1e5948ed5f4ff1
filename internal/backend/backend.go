// Package backend is the contract between package store and the backends
// that keep counters on a server (packages nativehash and tairhash), and the
// one home of the Lua they share.
//
// A backend is a set of Lua scripts, one per kind of call, that all take the
// same keys and arguments and answer in the same shape, so that store has one
// code path for every server. The scripts are assembled from .lua files:
//
//	constants     op and error codes, generated from this package's Go constants
//	base.lua      error style, the clock, helpers             (shared)
//	exact.lua     exact int64 arithmetic on doubles           (shared)
//	live.lua      the header, live buckets of a window shape  (shared)
//	Prims         the backend's access to its data type       (the backend's)
//	scan.lua      reading a whole counter, exact sums         (shared)
//	decide.lua    limits: retry, reset                        (shared)
//	distinct.lua  distinct counts: HyperLogLogs               (shared)
//	extreme.lua   window extremes: max, min, recent values    (shared)
//	Ops           the backend's counter operations, or ScanOps (the backend's)
//	lease.lua     leases: concurrency limits                  (shared)
//	event.lua     the write pipeline: ids, event times, limits (shared)
//	body          write.lua, sum.lua or inspect.lua           (shared)
//
// Each fragment starts with a "-- @file" marker, and a Script maps a line of
// the assembled source back to its file (see ScriptError).
//
// Prims must define:
//
//	WS_RESERVED                 table of the fields that are not buckets
//	ws_read(key[, L])           -> flat {field, value, ...} of the counter
//	                               (of window L: as the counter's operations
//	                               see it)
//	ws_drop(key, fields)        delete the given fields
//	ws_ttls(key, fields, pttl)  -> each field's remaining life in ms (-1: none)
//
// Prims or Ops must define how a script takes a counter's keys and what a
// call keeps between its operations:
//
//	WS_KPC                      how many entries of KEYS a counter takes
//	ws_ckey(k, j)               -> the key of the j-th counter (from 0) of
//	                               KEYS from index k
//	ws_begin()                  at a script's start: forget the last call's
//	ws_end()                    after each write operation: write what it
//	                               left for its end
//	ws_abort()                  after a failed operation: forget what it read
//	ws_meta(L, key)             -> flat {field, value, ...} of the counter's
//	                               state that is not in its buckets (Inspect)
//	ws_life(key)                -> the counter's remaining life, ms, as PTTL
//	                               answers (Inspect)
//
// Ops must define the counter operations the pipeline's stages call: ws_open,
// ws_prepare, ws_commit, ws_quiet, ws_quietcommit, ws_detail and ws_sumover
// (see scanops.lua); or be ScanOps (scanops.lua), which answers every
// operation from ws_read, takes a counter as one key and keeps nothing
// between operations, and needs two more primitives:
//
//	ws_incr(L, key, B, delta)   -> add delta (a decimal string) to bucket B
//	                               ({field, start, current}), set its expiry;
//	                               answer the bucket's new value
//	ws_get(key, field)          -> one field's value, or false
//
// Most users never import this package: store picks the backend.
package backend

import (
	"embed"
	"fmt"
	"strings"
	"time"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// Fragment is a piece of Lua with the name of the file it comes from.
type Fragment struct {
	Name string // the file, relative to the module root, e.g. "nativehash/lua/plain.lua"
	Src  string
}

// Embedded returns a fragment from an embedded file system: its file name is
// dir + "/" + name.
func Embedded(fsys embed.FS, dir, name string) Fragment {
	b, err := fsys.ReadFile("lua/" + name)
	if err != nil {
		panic(fmt.Sprintf("backend: no embedded Lua %s: %v", name, err))
	}
	return Fragment{Name: dir + "/lua/" + name, Src: string(b)}
}

func shared(name string) Fragment { return Embedded(luaFiles, "backend", name) }

// Shared Lua, for the packages that build scripts of their own (package limit).
var (
	// BaseLua is the error style and the clock (ws_err, ws_srvnow, ws_clock).
	BaseLua = shared("base.lua")
	// ScanOps makes a backend answer every operation from a full read of the
	// counter (its Ops).
	ScanOps = shared("scanops.lua")
)

// The backends' names and the native hash's family name, which
// store.WithBackend takes (store exports them as Backend*).
const (
	NameTairHash     = "tairhash"
	FamilyNativeHash = "nativehash"
	NameFieldTTL     = "nativehash-fieldttl"
	NamePlain        = "nativehash-plain"
)

// Spec declares a backend.
type Spec struct {
	// Name is the backend's name, unique among backends: "nativehash-plain".
	Name string
	// Family groups the modes of one data type: "nativehash". WithBackend
	// accepts a family and picks its first mode the server has.
	Family string
	// Requires lists the commands (lower case) the server must have for this
	// backend, as COMMAND INFO names them.
	Requires []string
	// FieldTTL reports whether buckets expire on their own, field by field.
	FieldTTL bool
	// Head reports that the backend keeps a head per key beside each
	// counter's hash (the plain hash: see package nativehash): a counter is
	// then two keys in a script's KEYS, its hash and its head (WS_KPC).
	Head bool
	// Reserved lists the fields of a counter that are not buckets.
	Reserved []string
	// Why says in a few words why the backend suits a server that has it,
	// for Detection.Reason.
	Why string
	// Prims and Ops are the backend's Lua (see the package doc).
	Prims, Ops []Fragment
	// ACL is the backend's own ACL rule: its label in docs/acl.md ("plain
	// hash") and the commands its scripts call ("+time +hgetall ..."), the
	// least that works; StoreConn comes before them. The tests check it
	// against the commands the scripts call, and run every operation as a
	// user with exactly this rule.
	ACL ACLRule
}

// An ACLRule is a rule of docs/acl.md: a label and what it allows.
type ACLRule struct {
	Label string
	Rule  string
}

// ACLRules returns the backend's rule (StoreConn, then its own), then the
// store's extras: every rule a store on this backend may need.
func (b *Backend) ACLRules() []ACLRule {
	return append([]ACLRule{{b.ACL.Label, StoreConn + " " + b.ACL.Rule}}, StoreExtras...)
}

// StoreConn is what every store client needs beyond its backend's scripts:
// its keys, the connection's handshake and detection, and the script commands
// (EVALSHA; FCALL is the "functions" rule).
const StoreConn = "~ws:* -@all +hello +ping +command|info +evalsha +eval +evalsha_ro +eval_ro"

// StoreExtras are the rules of the store's optional features, shared by every
// backend: event ids, Redis Functions, distinct counts, leases.
var StoreExtras = []ACLRule{
	{"event ids", "+get +set +del"},
	{"functions", "+fcall +fcall_ro +function|load"},
	{"distinct counts", "+pfadd +pfcount +pfmerge +pexpireat +del +hmget +hset +hdel +hgetall"},
	{"leases", "+zscore +zcount +zrangebyscore +zremrangebyscore +zrem +zadd +zrange +pexpireat"},
}

// Backend is one way of keeping counters on a server. Its zero value is not
// usable; backends come from New. A Backend is immutable and safe for
// concurrent use.
type Backend struct {
	Spec
	// Write runs a batch of write operations (see write.lua); Sum answers the
	// sums of many counters; both take a run of equal operations' arguments
	// once. Inspect lists one counter's fields. Sum and Inspect are
	// read-only.
	Write, Sum, Inspect *Script
	// Library is the three scripts as one Redis Functions library, which a
	// Runner prefers to EVALSHA.
	Library *Library
}

// New assembles a backend's scripts from its spec.
func New(spec Spec) *Backend {
	lib := []Fragment{constants(), BaseLua, shared("exact.lua"), shared("live.lua")}
	lib = append(lib, spec.Prims...)
	lib = append(lib, shared("scan.lua"), shared("decide.lua"), shared("distinct.lua"), shared("extreme.lua"))
	lib = append(lib, spec.Ops...)
	lib = append(lib, shared("lease.lua"), shared("event.lua"))
	body := func(name string) []Fragment { return append(append([]Fragment(nil), lib...), shared(name)) }
	b := &Backend{
		Spec:    spec,
		Write:   NewScript(spec.Name+" write", false, body("write.lua")...),
		Sum:     NewScript(spec.Name+" sum", true, body("sum.lua")...),
		Inspect: NewScript(spec.Name+" inspect", true, body("inspect.lua")...),
	}
	b.Library = NewLibrary("ws_"+spec.Name, b.Write, b.Sum, b.Inspect)
	return b
}

// registered holds every backend by name (see Register).
var registered = map[string]*Backend{}

// Register records b under its name, for Named, and returns it. A backend
// package registers each of its backends when it is initialized; a second
// backend of the same name panics.
func Register(b *Backend) *Backend {
	if registered[b.Name] != nil {
		panic("backend: " + b.Name + " registered twice")
	}
	registered[b.Name] = b
	return b
}

// Named returns the registered backend of that name. It panics when there is
// none: the callers name backends of packages they import.
func Named(name string) *Backend {
	b := registered[name]
	if b == nil {
		panic("backend: no backend named " + name)
	}
	return b
}

// IsReserved reports whether field is one of the backend's reserved fields.
func (b *Backend) IsReserved(field string) bool {
	for _, r := range b.Reserved {
		if r == field {
			return true
		}
	}
	return false
}

// The operation codes of a Write batch (write.lua, event.lua), their
// arguments, and what each answers (a group: see event.lua's header):
//
//	OpAdd      shape delta        Add: the new window sum
//	OpAddNoSum shape delta        AddNoSum: 1
//	OpAllow    shape limit cost   Allow: allowed, sum, retry ms, reset ms
//	OpDAdd     shape n member...  a distinct add: the window's count
//	OpXAdd     shape dir value    a window extreme's write: its value after
//	                              (an extreme, or the recent values: ms, value...)
//	OpDCount   shape lookback     a distinct count over the lookback (a
//	                              script of writes: PFCOUNT is a write command)
//	OpGroup    group              one group
//	OpLimits   list               a group of limits alone, without an id or
//	                              time, as one list "shape limit cost ..."
//	                              (see engine.Group.Op): answers as OpGroup
//	OpLink     n group...         the groups of one event on one server
//	OpCheck    group              a cluster's phase one: the stages before the
//	                              commit; 1, or the error (WS_E.PENDING: the id
//	                              is another call's reservation in flight)
//	OpReserve  nonce group        phase two: the group deciding alone; an
//	                              admitted one that wrote records
//	                              '1@T@S#nonce' (T its instant, S the server's)
//	OpUndo     nonce group        phase three after a refusal: what the group
//	                              counted because its limits admitted, taken
//	                              back if the record is this reservation's
//	OpSettle   nonce group        phase three after an admission: the record
//	                              becomes '1', never taken back
//	OpPaths    tag                the paths traced under tag (see Trace), for tests
const (
	OpAdd      = "a"
	OpAddNoSum = "n"
	OpAllow    = "w"
	OpDAdd     = "D"
	OpXAdd     = "X"
	OpGroup    = "g"
	OpLimits   = "W"
	OpLink     = "L"
	OpCheck    = "C"
	OpReserve  = "R"
	OpUndo     = "u"
	OpSettle   = "s"
	OpDCount   = "d"
	OpPaths    = "P"
)

// MaxRecent is how many of its most recent values a window keeps (XRecent):
// WS_RECENT in the scripts.
const MaxRecent = 16

// The directions of a window extreme (ItemExtreme, and the Sum script's reads).
const (
	XMax    = ">" // keep the greatest value
	XMin    = "<" // keep the least value
	XRecent = "*" // keep the most recent values (MaxRecent)
)

// The kinds of a group's items (see event.lua).
const (
	ItemCount    = "c" // shape delta: add, answer the sum
	ItemQuiet    = "q" // shape delta: add, answer 0
	ItemLimit    = "l" // shape limit cost: a limit of the group
	ItemIfOK     = "k" // shape delta: add only when the limits admit
	ItemDistinct = "h" // shape n members...: add to the HyperLogLog, answer the count
	ItemRead     = "r" // shape: answer the window sum, write nothing
	ItemExtreme  = "m" // shape dir value: keep the bucket's max or min (see extreme.lua)
	ItemXRead    = "M" // shape dir: answer the window's extreme, write nothing
	ItemAcquire  = "a" // max ttl id: take a lease, a limit of the group
	ItemRefresh  = "f" // max ttl id: extend a held lease
	ItemRelease  = "x" // max ttl id: end a held lease
)

// MaxLeaseTTL bounds a lease's time to live (the ttl of ItemAcquire and
// ItemRefresh): 2^40 ms, about 34 years, so that an end instant stays an
// exact integer in the scripts' doubles. Package store checks an Op's TTL
// against it, package limit a Concurrency's.
const MaxLeaseTTL = time.Duration(1<<40) * time.Millisecond

// The codes of the errors the scripts raise, as the first word of the error
// reply ("WSOVERFLOW windowstore: ...").
const (
	CodeNotCounter = "WSNOTCOUNTER" // the key holds a hash that is not a counter
	CodeOverflow   = "WSOVERFLOW"   // a bucket or a sum would leave int64
	CodeClock      = "WSCLOCK"      // server and client clocks a year apart
	CodeArgs       = "WSARGS"       // a malformed call: a bug, not bad input
	CodeTooOld     = "WSTOOOLD"     // an event whose bucket has left the window (no script raises it now)
	CodeFuture     = "WSFUTURE"     // an event beyond the future tolerance
	CodePending    = "WSPENDING"    // an event id another call is recording (a cluster's check)
)

// constants is the Lua that defines the codes above, so that they are
// written once, here.
func constants() Fragment {
	var b strings.Builder
	b.WriteString("-- Generated from package backend's Go constants: op and error codes.\n")
	for _, c := range [][2]string{
		{"WS_OP_ADD", OpAdd}, {"WS_OP_ADDNOSUM", OpAddNoSum}, {"WS_OP_ALLOW", OpAllow},
		{"WS_OP_GROUP", OpGroup}, {"WS_OP_LIMITS", OpLimits}, {"WS_OP_DCOUNT", OpDCount}, {"WS_OP_DADD", OpDAdd}, {"WS_OP_XADD", OpXAdd}, {"WS_OP_LINK", OpLink}, {"WS_OP_UNDO", OpUndo},
		{"WS_OP_CHECK", OpCheck}, {"WS_OP_SETTLE", OpSettle}, {"WS_OP_PATHS", OpPaths}, {"WS_OP_RESERVE", OpReserve}, {"WS_X_MAX", XMax}, {"WS_X_MIN", XMin}, {"WS_X_RECENT", XRecent},
		{"WS_IT_COUNT", ItemCount}, {"WS_IT_QUIET", ItemQuiet}, {"WS_IT_LIMIT", ItemLimit},
		{"WS_IT_IFOK", ItemIfOK}, {"WS_IT_DISTINCT", ItemDistinct}, {"WS_IT_READ", ItemRead}, {"WS_IT_EXTREME", ItemExtreme}, {"WS_IT_XREAD", ItemXRead},
		{"WS_IT_ACQUIRE", ItemAcquire}, {"WS_IT_REFRESH", ItemRefresh}, {"WS_IT_RELEASE", ItemRelease},
	} {
		fmt.Fprintf(&b, "local %s = '%s'\n", c[0], c[1])
	}
	// The error codes the scripts raise, in one table: they are read on
	// errors only, and a library's main chunk has room for about 200 locals.
	b.WriteString("local WS_E = {")
	for i, c := range [][2]string{{"NOTCOUNTER", CodeNotCounter}, {"OVERFLOW", CodeOverflow}, {"CLOCK", CodeClock},
		{"ARGS", CodeArgs}, {"FUTURE", CodeFuture}, {"PENDING", CodePending}} {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s = '%s'", c[0], c[1])
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "local WS_HEADER = %d\n", HeaderLen)
	fmt.Fprintf(&b, "local WS_RECENT = %d\n", MaxRecent)
	return Fragment{Name: "backend/constants (generated)", Src: b.String()}
}
