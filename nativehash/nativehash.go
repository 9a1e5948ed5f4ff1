// Package nativehash keeps window counters in native Redis hashes, one hash
// per counter, one field per bucket.
//
// It has two modes, two backends of the same family ("nativehash"):
//
//   - Plain (any Redis >= 7.0, any Valkey): fields never expire on their own.
//     The hash keeps a running total beside the buckets (fields m and t, below), so a write
//     reads three fields, not the whole counter; the buckets that leave the
//     window are deleted by the next write, and a write that starts a bucket
//     sets the key's expiry to the moment that bucket leaves the window, so an
//     idle counter vanishes on its own.
//   - FieldTTL (Redis >= 7.4, Valkey >= 9): every bucket field expires on its
//     own (HPEXPIREAT with an absolute time, once per bucket: HINCRBY keeps a
//     field's TTL). Reads never need to delete; the key's expiry stays as a
//     safety net.
//
// Every operation runs inside one Lua script (the store batches many
// operations into one script call). The commands of one operation:
//
//	operation  plain                                   field TTL
//	Add        HMGET (3 fields), HSET, [PEXPIREAT]     HGETALL, HINCRBY, [HPEXPIREAT, PEXPIREAT]
//	NoSum      as Add                                  HGET, HINCRBY, [HGETALL, HPEXPIREAT, PEXPIREAT]
//	Allow      as Add when it fits; else HGETALL too   HGETALL, [HINCRBY, HPEXPIREAT, PEXPIREAT]
//	Sum        HMGET (3 fields)                        HGETALL
//
// (NoSum: a write that asks for no sum, store.Event.NoSum; in brackets: once
// per bucket; NoSum's HGETALL refuses a hash that is not a counter before its
// first write gives it an expiry). On the plain hash, once per bucket boundary
// a write also sweeps: HMGET and HDEL of the buckets that left; a counter idle
// for more than 32 buckets, or whose total reaches 2^53, is read whole
// (HGETALL) once. With the server clock (the default) each script call also
// runs TIME once.
//
// # The plain hash's fields
//
// Besides the buckets, a plain hash keeps a running total (field t) of the
// buckets that start at or after a mark (field m, Unix ms): the start of the
// oldest bucket that was live at the last write. So a write or a sum reads
// three fields (m, t and its bucket), not the whole counter:
//
//	fields of one counter, Window{10s, 1s}, at 12:00:15.3
//	m  1735732806000   (12:00:06: oldest live bucket at the last write)
//	t  42              (sum of the buckets that start at or after m)
//	6 ... 15           the buckets (codes), 12:00:06 ... 12:00:15
//
//	Add at 12:00:17.1: the oldest live bucket is now 12:00:08, so buckets 6
//	and 7 have left: HMGET them, take them off t, HSET m, t and bucket 17,
//	then HDEL 6 and 7.
//
// A write sweeps at most 32 buckets that way; a counter idle for longer, a
// total that reaches 2^53, a clock that went back past m, or a hash without m
// and t (a new counter) is read whole once (HGETALL) and its total rebuilt.
package nativehash

import (
	"embed"

	"github.com/windowstore/windowstore/internal/backend"
)

//go:embed lua/*.lua
var lua embed.FS

func frag(name string) backend.Fragment { return backend.Embedded(lua, "nativehash", name) }

// The names of the family's two backends, for store.WithBackend (the family
// itself is "nativehash": field TTL where the server has it, else plain).
const (
	// Plain names the backend for any Redis or Valkey.
	Plain = "nativehash-plain"
	// FieldTTL names the backend for servers with hash-field TTL.
	FieldTTL = "nativehash-fieldttl"
)

// plain is the backend for servers without hash-field TTL (see the package
// doc for its fields).
var plain = backend.Register(backend.New(backend.Spec{
	Name:     Plain,
	Family:   "nativehash",
	Requires: []string{"hincrby"},
	Head:     true,
	Reserved: []string{"m", "t"},
	Why:      "the plain native hash works on any Redis or Valkey: writes delete the buckets that left the window",
	Prims:    []backend.Fragment{frag("plainprims.lua")},
	Ops:      []backend.Fragment{frag("plain.lua")},
	ACL:      backend.ACLRule{Label: "plain hash", Rule: "+time +pttl +hgetall +hmget +hset +pexpireat +hdel +get +set +del +exists"},
}))

// fieldTTL is the backend for servers with hash-field TTL (HPEXPIREAT). Every
// operation reads the whole counter (the shared scan-based operations): a
// running total would need the buckets to outlive the window, which is what
// field TTLs are there to prevent.
var fieldTTL = backend.Register(backend.New(backend.Spec{
	Name:     FieldTTL,
	Family:   "nativehash",
	Requires: []string{"hincrby", "hpexpireat"},
	FieldTTL: true,
	Why:      "the server has hash-field TTL (HPEXPIREAT): buckets expire per field",
	Prims:    []backend.Fragment{frag("hash.lua"), frag("fieldttl.lua"), frag("fieldttlx.lua")},
	Ops:      []backend.Fragment{backend.ScanOps},
	ACL:      backend.ACLRule{Label: "field TTL", Rule: "+time +pttl +hgetall +hget +hincrby +hset +hpexpireat +pexpireat +hdel +hpttl"},
}))
