// Package nativehash keeps window counters in native Redis hashes, one hash
// per counter, one field per bucket.
//
// It has two modes, picked by package store from what the server offers:
//
//   - Plain (any Redis, any Valkey): fields never expire on their own. Every
//     script deletes the stale buckets it sees (one HDEL), and every write sets
//     the key's expiry to the moment its newest bucket leaves the window, so an
//     idle counter vanishes on its own.
//   - FieldTTL (Redis >= 7.4, Valkey >= 9): every write also sets the bucket's
//     own expiry with HPEXPIREAT, re-applied with an absolute time on each write
//     (HINCRBY keeps a field's TTL, but an expired field restarts without one).
//     Reads never need to delete; the key expiry stays as a safety net.
//
// Both modes run one Lua script per operation: one round trip. The commands
// each script runs, for a counter with n fields:
//
//	operation  plain                                   field TTL
//	Add        HGETALL, HINCRBY, PEXPIREAT, [HDEL]     HGETALL, HINCRBY, HPEXPIREAT, PEXPIREAT
//	Sum        HGETALL, [HDEL]                         HGETALL
//	Allow      HGETALL, [HINCRBY, PEXPIREAT], [HDEL]   HGETALL, [HINCRBY, HPEXPIREAT, PEXPIREAT]
//	AddNoSum   HINCRBY, PEXPIREAT, HLEN, [HGETALL, HDEL] HINCRBY, HPEXPIREAT, PEXPIREAT
//
// HDEL runs only when there are stale fields; AddNoSum reads the counter only
// when HLEN says it holds more fields than a window can. With the server clock (the
// default) each script also runs TIME.
package nativehash

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/backend"
)

// Name is the backend name that both modes report.
const Name = "nativehash"

const common = `
local function ws_read(key) return redis.call('HGETALL', key) end
local function ws_drop(key, fields)
  ws_chunks(fields, function(...) redis.call('HDEL', key, ...) end)
end
`

// Plain is the backend for servers without hash-field TTL.
var Plain = backend.New(Name, false, backend.Ops(common+`
local function ws_incr(L, key, delta)
  redis.call('HINCRBY', key, L.field, delta)
  redis.call('PEXPIREAT', key, ws_expiry(L, L.cstart + L.w))
end
local function ws_ttls(key, fields, pttl)
  local out = {}
  for i = 1, #fields do out[i] = pttl end
  return out
end
local function ws_tidy(L, key)
  -- A window holds at most w/b + 1 buckets (one more across a year end).
  if redis.call('HLEN', key) > L.w / L.b + 1 then
    local S = ws_scan(L, ws_read(key))
    if #S.stale > 0 then ws_drop(key, S.stale) end
  end
end
`))

// FieldTTL is the backend for servers with hash-field TTL (HPEXPIREAT).
var FieldTTL = backend.New(Name, true, backend.Ops(common+`
local function ws_incr(L, key, delta)
  redis.call('HINCRBY', key, L.field, delta)
  local at = ws_expiry(L, L.cstart + L.w)
  redis.call('HPEXPIREAT', key, at, 'FIELDS', 1, L.field)
  redis.call('PEXPIREAT', key, at)
end
local function ws_ttls(key, fields, pttl)
  local out = {}
  ws_chunks(fields, function(...)
    local t = redis.call('HPTTL', key, 'FIELDS', select('#', ...), ...)
    for i = 1, #t do out[#out + 1] = t[i] end
  end)
  return out
end
local function ws_tidy(L, key) end
`))

// SupportsFieldTTL reports whether the server has hash-field TTL, by asking
// COMMAND INFO about HPEXPIREAT (capability, not version strings).
func SupportsFieldTTL(ctx context.Context, c rueidis.Client) (bool, error) {
	res, err := c.Do(ctx, c.B().CommandInfo().CommandName("hpexpireat").Build()).ToArray()
	if err != nil {
		return false, fmt.Errorf("nativehash: COMMAND INFO: %w", err)
	}
	return len(res) == 1 && !res[0].IsNil(), nil
}
