// Package nativehash keeps window counters in native Redis hashes, one hash
// per counter, one field per bucket.
//
// It has two modes, picked by package store from what the server offers:
//
//   - Plain (any Redis, any Valkey): fields never expire on their own. The
//     hash keeps a running total beside the buckets (see Plain), so a write
//     reads three fields, not the whole counter; the buckets that leave the
//     window are deleted by the next write, and every write that starts a
//     bucket sets the key's expiry to the moment that bucket leaves the
//     window, so an idle counter vanishes on its own.
//   - FieldTTL (Redis >= 7.4, Valkey >= 9): every write also sets the bucket's
//     own expiry with HPEXPIREAT, re-applied with an absolute time on each write
//     (HINCRBY keeps a field's TTL, but an expired field restarts without one).
//     Reads never need to delete; the key expiry stays as a safety net.
//
// Every operation runs inside one Lua script (package backend batches many
// operations into one script call). The commands of one operation, for a
// counter with n fields:
//
//	operation  plain                                     field TTL
//	Add        HMGET (3 fields), HSET, [PEXPIREAT]       HGETALL, HINCRBY, HPEXPIREAT, PEXPIREAT, [HDEL]
//	AddNoSum   as Add                                    HINCRBY, HPEXPIREAT, PEXPIREAT
//	Allow      as Add when it fits; else HGETALL too     HGETALL, [HINCRBY, HPEXPIREAT, PEXPIREAT]
//	Sum        HMGET (3 fields)                          HGETALL
//
// On the plain hash PEXPIREAT runs once per new bucket, and once per bucket
// boundary a write also sweeps: HMGET and HDEL of the buckets that left, HSET
// of the total. A counter idle for more than 32 buckets, or whose total went
// past 2^53, is read whole (HGETALL) once. With the server clock (the
// default) each script call also runs TIME once.
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

// Plain is the backend for servers without hash-field TTL. Besides the
// buckets, its hash keeps a running total (field t) of the buckets that start
// at or after a mark (field m, Unix ms): the start of the oldest bucket that
// was live at the last write. So a write or a sum reads two fields, not the
// whole counter:
//
//	fields of one counter, Window{10s, 1s}, at 12:00:15.3
//	m  1735732806000   (12:00:06: oldest live bucket at the last write)
//	t  42              (sum of the buckets that start at or after m)
//	6 ... 15           the buckets (codes), 12:00:06 ... 12:00:15
//
//	Add at 12:00:17.1: the oldest live bucket is now 12:00:08, so buckets 6
//	and 7 have left: HMGET them, subtract them from t, HDEL them, m = 12:00:08;
//	then add delta to t and to bucket 17.
//
// A write sweeps at most WS_SWEEP buckets that way; a counter idle for longer,
// a sum beyond 2^53, a clock that went back past m, or a hash without m and t
// (a new counter) is read whole once (HGETALL) and its total rebuilt.
var Plain = backend.New(Name, false, backend.Prims(common+`
local function ws_incr(L, key, delta)
  redis.call('HINCRBY', key, L.field, delta)
  redis.call('PEXPIREAT', key, ws_expiry(L, L.cstart + L.w))
end
local function ws_ttls(key, fields, pttl)
  local out = {}
  for i = 1, #fields do out[i] = pttl end
  return out
end
`), backend.Ops(`
-- ws_total returns the window sum as an exact decimal string; whether m and t
-- hold it now; and the current bucket's value as stored (false: no such
-- field; nil: not read). It reads m, t and the current bucket in one HMGET.
-- With write, it sweeps (deletes the buckets that left the window and moves m
-- and t) or rebuilds (deletes stale fields; writes m and t when live buckets
-- remain, as then the key has its expiry, else deletes them). Either way m
-- and t agree with the buckets afterwards, whether or not a write follows.
-- Without write it writes nothing.
local function ws_total(L, key, write)
  local low = ws_low(L)
  local mt = redis.call('HMGET', key, 'm', 't', L.field)
  local m, t = tonumber(mt[1]), tonumber(mt[2])
  if m ~= nil and t ~= nil and m <= low and t < WS_BIG and t > -WS_BIG then
    if m == low then return mt[2], true, mt[3] end
    local dead = ws_dead(L, m, low)
    if dead ~= nil then
      local vals = redis.call('HMGET', key, unpack(dead))
      local gone, del, ok = 0, {}, true
      for i = 1, #dead do
        if vals[i] then
          local v = tonumber(vals[i])
          if v == nil or v >= WS_BIG or v <= -WS_BIG then ok = false else gone = gone + v end
          del[#del + 1] = dead[i]
        end
      end
      local sum = t - gone
      if ok and sum < WS_BIG and sum > -WS_BIG then
        local str = string.format('%d', sum)
        -- With nothing deleted, m and t still agree with the buckets, and
        -- ws_put moves m with its own write; else they move now.
        if not write or #del == 0 then return str, false, mt[3] end
        redis.call('HDEL', key, unpack(del))
        redis.call('HSET', key, 'm', string.format('%d', low), 't', str)
        return str, true, mt[3]
      end
    end
  end
  local all = ws_read(key)
  local S = ws_scan(L, all)
  local sum = string.format('%d', S.sum)
  if S.big then
    sum = ws_exactsum(L, all, '0')
    if sum == nil then ws_err('WSOVERFLOW', 'the window sum leaves the int64 range') end
  end
  if not write then return sum, false end
  if #S.stale > 0 then ws_drop(key, S.stale) end
  if S.live == 0 then
    -- No bucket left: the key may have no expiry now, so m and t go too.
    if mt[1] or mt[2] then redis.call('HDEL', key, 'm', 't') end
    return sum, false
  end
  redis.call('HSET', key, 'm', string.format('%d', low), 't', sum)
  return sum, true
end

-- ws_put adds delta (a string) to t and to the current bucket, once ws_total
-- has answered (sum, synced, cur). It returns the new total (a number) and the
-- bucket's new value. It writes nothing when an increment would overflow.
-- When every number is below 2^53 it writes with one HSET; else with HINCRBY,
-- which checks the int64 range exactly.
local function ws_put(L, key, sum, synced, cur, delta)
  local s, d = tonumber(sum), tonumber(delta)
  if cur ~= nil then
    local v = 0
    if cur then v = tonumber(cur) end
    if v ~= nil and s < WS_BIG and s > -WS_BIG and d < WS_BIG and d > -WS_BIG
        and v < WS_BIG and v > -WS_BIG then
      local nt, nv = s + d, v + d
      if nt < WS_BIG and nt > -WS_BIG and nv < WS_BIG and nv > -WS_BIG then
        if synced then
          redis.call('HSET', key, 't', string.format('%d', nt), L.field, string.format('%d', nv))
        else
          redis.call('HSET', key, 'm', string.format('%d', ws_low(L)), 't', string.format('%d', nt),
            L.field, string.format('%d', nv))
        end
        if not cur then
          redis.call('PEXPIREAT', key, string.format('%d', ws_expiry(L, L.cstart + L.w)))
        end
        return nt, nv
      end
    end
  end
  if not synced then
    redis.call('HSET', key, 'm', string.format('%d', ws_low(L)), 't', sum)
  end
  local ok, t = pcall(redis.call, 'HINCRBY', key, 't', delta)
  if not ok then
    if string.find(ws_errmsg(t), 'overflow') then
      ws_err('WSOVERFLOW', 'the window sum would leave the int64 range; nothing was written')
    end
    error(t)
  end
  local okb, v = pcall(redis.call, 'HINCRBY', key, L.field, delta)
  if not okb then
    local neg = string.sub(delta, 1, 1) == '-' and string.sub(delta, 2) or '-' .. delta
    redis.call('HINCRBY', key, 't', neg)
    if string.find(ws_errmsg(v), 'overflow') then
      ws_err('WSOVERFLOW', 'the bucket would leave the int64 range; nothing was written')
    end
    error(v)
  end
  if v == d then
    redis.call('PEXPIREAT', key, string.format('%d', ws_expiry(L, L.cstart + L.w)))
  end
  return t, v
end

local function ws_add(L, key, delta)
  local sum, synced, cur = ws_total(L, key, true)
  local t = ws_put(L, key, sum, synced, cur, delta)
  if t >= WS_BIG or t <= -WS_BIG then return redis.call('HGET', key, 't') end
  return t
end

local function ws_addnosum(L, key, delta)
  local sum, synced, cur = ws_total(L, key, true)
  ws_put(L, key, sum, synced, cur, delta)
  return 1
end

local function ws_allow(L, key, limit, cost)
  local sum, synced, cur = ws_total(L, key, true)
  local s, c = tonumber(sum), tonumber(cost)
  if s >= WS_BIG or s <= -WS_BIG then
    ws_err('WSOVERFLOW', 'the window sum is beyond 2^53; Allow cannot decide exactly')
  end
  if c ~= 0 and s + c <= limit then
    local _, v = ws_put(L, key, sum, synced, cur, cost)
    -- The current bucket is the newest; if it sums to 0, ws_decide finds the
    -- newest that does not.
    if v ~= 0 then return {1, s + c, 0, L.cstart + L.w - L.now} end
    return ws_decide(L, key, limit, '0', false)
  end
  return ws_decide(L, key, limit, cost, false)
end

local function ws_sum(L, key)
  if L.lb ~= L.w then return ws_scansum(L, key) end
  local sum = ws_total(L, key, false)
  local n = tonumber(sum)
  if n < WS_BIG and n > -WS_BIG then return n end
  return sum
end
`))

// FieldTTL is the backend for servers with hash-field TTL (HPEXPIREAT). Every
// operation reads the whole counter (the shared scan-based operations): a
// running total would need the buckets to outlive the window, which is what
// field TTLs are there to prevent.
var FieldTTL = backend.New(Name, true, backend.Prims(common+`
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
`), backend.ScanOps)

// SupportsFieldTTL reports whether the server has hash-field TTL, by asking
// COMMAND INFO about HPEXPIREAT (capability, not version strings).
func SupportsFieldTTL(ctx context.Context, c rueidis.Client) (bool, error) {
	res, err := c.Do(ctx, c.B().CommandInfo().CommandName("hpexpireat").Build()).ToArray()
	if err != nil {
		return false, fmt.Errorf("nativehash: COMMAND INFO: %w", err)
	}
	return len(res) == 1 && !res[0].IsNil(), nil
}
