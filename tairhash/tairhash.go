// Package tairhash keeps window counters in TairHash (exHash) keys, on Alibaba
// Tair or on Redis with the open-source TairHash module: one key per counter,
// one field per bucket, and each field expires on its own.
//
// Each write is EXHINCRBY with no TTL argument, then EXHPEXPIREAT with the
// bucket's absolute expiry (the moment it leaves the window), in one script.
// Both halves matter, and were checked on real servers:
//
//   - EXHINCRBY without a TTL argument clears the field's TTL, so the expiry
//     must be set again on every write, not only when the field is new;
//   - EXHINCRBY's own TTL arguments (PXAT, PX then KEEPTTL) reach replicas
//     wrong (decades, or never), while EXHPEXPIREAT with an absolute time
//     replicates correctly. A promoted replica would otherwise count forever.
//
// Reads use EXHGETALL, which skips expired fields, so no sweep is needed. The
// key gets no expiry of its own: the module deletes it with its last field
// (in its active expiry, every second by default over a bounded number of
// keys, after the field expires), and a key-level expiry crashed the module
// (an assertion in its passive expiry, once Redis had expired the key under
// it), even in SORT mode.
//
// The commands of one operation (the store batches many operations into one
// script call, which also runs TIME once; NoSum is a write that asks for no
// sum, store.Event.NoSum):
//
//	Add      EXHGETALL, EXHINCRBY, EXHPEXPIREAT
//	NoSum    EXHGET, EXHINCRBY, EXHPEXPIREAT (and EXHGETALL once per
//	         bucket, to refuse a key that is not a counter)
//	Sum      EXHGETALL
//	Allow    EXHGETALL, and when it allows: EXHINCRBY, EXHPEXPIREAT
//
// A TairHash key and a native hash key cannot be mixed: each type's commands
// fail with WRONGTYPE on the other, and the store reports store.ErrWrongType.
//
// Users of the open-source module: build it with -DSORT_MODE=ON. Its default
// "scan" active-expire mode crashed Redis 7.0 under window workloads (see
// docs/backends.md).
package tairhash

import (
	"embed"

	"github.com/windowstore/windowstore/internal/backend"
)

//go:embed lua/*.lua
var lua embed.FS

// tair is the TairHash backend.
var tair = backend.Register(backend.New(backend.Spec{
	Name:     backend.NameTairHash,
	Family:   backend.NameTairHash,
	Requires: []string{"exhincrby", "exhpexpireat"},
	FieldTTL: true,
	Why:      "the server has TairHash (EXHINCRBY): buckets expire per field",
	Prims:    []backend.Fragment{backend.Embedded(lua, "tairhash", "tairhash.lua")},
	Ops:      []backend.Fragment{backend.ScanOps},
	ACL:      backend.ACLRule{Label: "TairHash", Rule: "+time +pttl +exhgetall +exhget +exhincrby +exhset +exhpexpireat +exhdel +exhpttl"},
}))
