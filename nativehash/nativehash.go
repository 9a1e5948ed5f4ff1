// Package nativehash keeps window counters in native Redis hashes, one field
// per bucket.
//
// It has two modes, two backends of the same family ("nativehash"):
//
//   - Plain (any Redis >= 7.0, any Valkey): fields never expire on their own.
//     Each key has a head beside its counters' hashes: a short string that
//     holds, per window, a running total and the current bucket's value
//     (below), so an event on a synced window reads and writes the head
//     alone, one GET and one SET whatever the number of windows. The buckets
//     that leave a window are swept from its total and deleted once per
//     bucket, and every key expires when its newest bucket leaves its
//     window, so an idle counter vanishes on its own.
//   - FieldTTL (Redis >= 7.4, Valkey >= 9): every bucket field expires on its
//     own (HPEXPIREAT with an absolute time, once per bucket: HINCRBY keeps a
//     field's TTL). Reads never need to delete; the key's expiry stays as a
//     safety net.
//
// Every operation runs inside one Lua script (the store batches many
// operations into one script call). The commands of one operation:
//
//	operation  plain                                   field TTL
//	Add        GET, SET (the head)                     HGETALL, HINCRBY, [HPEXPIREAT, PEXPIREAT]
//	NoSum      as Add                                  HGET, HINCRBY, [HGETALL, HPEXPIREAT, PEXPIREAT]
//	Allow      as Add when it fits; else HGETALL too   HGETALL, [HINCRBY, HPEXPIREAT, PEXPIREAT]
//	Sum        GET (the head), [HMGET]                 HGETALL
//
// (NoSum: a write that asks for no sum, store.Event.NoSum; in brackets: once
// per bucket; NoSum's HGETALL refuses a hash that is not a counter before its
// first write gives it an expiry). On the plain hash, once per bucket of a
// window, a write also moves the window's record: HMGET of the buckets that
// left and of the new bucket, HSET of the bucket the record held (a flush),
// PEXPIREAT of the hash, HDEL of the buckets that left, and the head's SET
// with its new expiry; a sum of a window that moved since its last write
// reads the buckets that left (HMGET). The limits of one key's windows (store.AllowAll of
// policies on one key) are one GET and one SET of its head. A counter idle
// for more than 32 buckets, or whose total reaches 2^53, is read whole
// (HGETALL). With the server clock (the default) each script call also runs
// TIME once.
//
// # The plain hash's keys
//
// A counter is its buckets' hash, one field per bucket code as on every
// backend, and its key's head, shared by the counters of one key under one
// prefix (the windows of a store's tiers, stores of other windows):
//
//	ws:{user:42}:h           the head: one record per window
//	ws:{user:42}:10s/1s:b    the buckets of the 10s/1s window
//
// A record is six doubles: the window's bucket and length (which window it
// is), m, the start of the oldest bucket live at the last write, t, the sum
// of the buckets that start at or after m, and c and v, the current bucket's
// start and value, which the bucket's field does not hold until the window
// moves on:
//
//	Window{10s, 1s} at 12:00:15.3, synced at the last write
//	head     m 12:00:06  t 42  c 12:00:15  v 3
//	hash     6 ... 14           the buckets before c (codes), 12:00:06 ... 12:00:14
//
//	Add 1 at 12:00:15.8: t 43, v 4 (GET and SET of the head)
//	Add 1 at 12:00:17.1: buckets 6 and 7 have left: HMGET them, take them
//	off t; HSET 15 4 (the flush); the record becomes m 12:00:08,
//	t 43 - b6 - b7 + 1, c 12:00:17, v 1; HDEL 6 and 7; both keys' expiries move.
//
// A write sweeps at most 32 buckets that way; a counter idle for longer, a
// total that reaches 2^53, a clock that went back past m, or a counter
// without a record (new) is read whole once (HGETALL) and its record rebuilt.
// Store.Inspect reports the record as Meta["m"] and Meta["t"]; the plain
// hash's Lua (lua/plainprims.lua, lua/plain.lua) has the details.
//
// # The event pipeline and the one fast path
//
// Every write runs the shared event pipeline (internal/backend/lua/event.lua:
// place, decide, check, then write), on every backend. The plain hash adds
// one fast path (lua/fast.lua) for the commonest calls: counts, quiet counts,
// limits, distinct adds and window extremes, alone or in one group or link
// (a group of limits alone comes as one argument, which the script parses
// once; a feature set's event is a link), with no event id and no event
// time, in one loop; a synced window's record is updated in place, another
// goes through the pipeline's own primitives, a distinct add or an extreme
// through distinct.lua's or extreme.lua's once every limit has admitted, and
// an admitted limit answers its sum and reset alone. An Allow that refuses is
// answered there too, with the pipeline's retry and reset (decide.lua),
// writing nothing. It hands the whole call to the pipeline before it writes
// anything when the call is not simple (a group that refuses, a negative
// cost, a bucket whose value would be 0); tests/counters_test.go drives both
// with the same random operations and compares their answers, their errors
// and every key's DUMP.
package nativehash

import (
	"embed"

	"github.com/windowstore/windowstore/internal/backend"
)

//go:embed lua/*.lua
var lua embed.FS

func frag(name string) backend.Fragment { return backend.Embedded(lua, "nativehash", name) }

// plain is the backend for servers without hash-field TTL (see the package
// doc for its fields).
var plain = backend.Register(backend.New(backend.Spec{
	Name:     backend.NamePlain,
	Family:   backend.FamilyNativeHash,
	Requires: []string{"hincrby"},
	Head:     true,
	Reserved: []string{"m", "t"},
	Why:      "the plain native hash works on any Redis or Valkey: writes delete the buckets that left the window",
	Prims:    []backend.Fragment{frag("pack.lua"), frag("plainprims.lua")},
	Ops:      []backend.Fragment{frag("plain.lua"), frag("fast.lua")},
	ACL:      backend.ACLRule{Label: "plain hash", Rule: "+time +pttl +hgetall +hmget +hset +pexpireat +hdel +get +mget +set +del"},
}))

// fieldTTL is the backend for servers with hash-field TTL (HPEXPIREAT). Every
// operation reads the whole counter (the shared scan-based operations): a
// running total would need the buckets to outlive the window, which is what
// field TTLs are there to prevent.
var fieldTTL = backend.Register(backend.New(backend.Spec{
	Name:     backend.NameFieldTTL,
	Family:   backend.FamilyNativeHash,
	Requires: []string{"hincrby", "hpexpireat"},
	FieldTTL: true,
	Why:      "the server has hash-field TTL (HPEXPIREAT): buckets expire per field",
	Prims:    []backend.Fragment{frag("fieldttl.lua"), frag("fieldttlx.lua")},
	Ops:      []backend.Fragment{backend.ScanOps},
	ACL:      backend.ACLRule{Label: "field TTL", Rule: "+time +pttl +hgetall +hget +hincrby +hset +hpexpireat +pexpireat +hdel +hpttl"},
}))
