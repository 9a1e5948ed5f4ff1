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
// key gets no expiry of its own: the module deletes it with its last field,
// and a key-level expiry crashed the module (an assertion in its passive
// expiry, once Redis had expired the key under it), even in SORT mode.
//
// The commands of one operation (package backend batches many operations into
// one script call, which also runs TIME once):
//
//	Add      EXHGETALL, EXHINCRBY, EXHPEXPIREAT
//	AddNoSum EXHINCRBY, EXHPEXPIREAT
//	Sum      EXHGETALL
//	Allow    EXHGETALL, and when it allows: EXHINCRBY, EXHPEXPIREAT
//
// A TairHash key and a native hash key cannot be mixed: each type's commands
// fail with WRONGTYPE on the other, and the store reports store.ErrWrongType.
//
// Users of the open-source module: build it with -DSORT_MODE=ON. Its default
// "scan" active-expire mode crashed Redis 7.0 under window workloads (see the
// README).
package tairhash

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/backend"
)

// Name is the backend's name.
const Name = "tairhash"

// Backend is the TairHash backend.
var Backend = backend.New(Name, true, backend.Prims(`
local function ws_read(key) return redis.call('EXHGETALL', key) end
local function ws_incr(L, key, delta)
  redis.call('EXHINCRBY', key, L.field, delta)
  local at = ws_expiry(L, L.cstart + L.w)
  redis.call('EXHPEXPIREAT', key, L.field, at)
end
local function ws_drop(key, fields)
  ws_chunks(fields, function(...) redis.call('EXHDEL', key, ...) end)
end
local function ws_ttls(key, fields, pttl)
  local out = {}
  for i = 1, #fields do out[i] = redis.call('EXHPTTL', key, fields[i]) end
  return out
end
`), backend.ScanOps)

// FieldPTTL returns the remaining life of one field in ms, as EXHPTTL answers:
// -1 for a field without expiry, -2 for a missing key, -3 for a missing field.
// It is for operators and tests; the store's scripts never need it.
func FieldPTTL(ctx context.Context, c rueidis.Client, key, field string) (int64, error) {
	n, err := c.Do(ctx, FieldPTTLCommand(c, key, field)).AsInt64()
	if err != nil {
		return 0, fmt.Errorf("tairhash: EXHPTTL: %w", err)
	}
	return n, nil
}

// FieldPTTLCommand builds EXHPTTL key field.
func FieldPTTLCommand(c rueidis.Client, key, field string) rueidis.Completed {
	return c.B().Arbitrary("EXHPTTL").Keys(key).Args(field).Build()
}
