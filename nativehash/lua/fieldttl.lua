-- The native hash with hash-field TTL (Redis >= 7.4, Valkey >= 9): every
-- bucket field expires on its own, when its bucket leaves the window.
--
-- HINCRBY keeps a field's TTL, and a field that expired restarts without one
-- (it answers with the increment itself), so the TTL is set, with an absolute
-- time, whenever HINCRBY answers delta: once per bucket. The key's own expiry
-- is a safety net, set when the newest bucket starts; an earlier (late)
-- bucket may only extend it (GT).

local WS_RESERVED = {}

local function ws_get(key, field) return redis.call('HGET', key, field) end

-- ws_fieldexpire makes bucket B's field expire when B leaves the window,
-- and the key with its newest bucket (an earlier, late, one may only extend
-- it: GT).
local function ws_fieldexpire(L, key, B)
  local at = ws_expiry(L.H, B.start + L.w)
  redis.call('HPEXPIREAT', key, at, 'FIELDS', 1, B.field)
  if B.current then redis.call('PEXPIREAT', key, at) else redis.call('PEXPIREAT', key, at, 'GT') end
end

local function ws_incr(L, key, B, delta)
  local v = redis.call('HINCRBY', key, B.field, delta)
  if v == tonumber(delta) then ws_fieldexpire(L, key, B) end
  return v
end

local function ws_ttls(key, fields, pttl)
  local out = {}
  ws_chunks(fields, function(...)
    local t = redis.call('HPTTL', key, 'FIELDS', select('#', ...), ...)
    for i = 1, #t do out[#out + 1] = t[i] end
  end)
  return out
end

local function ws_read(key) return redis.call('HGETALL', key) end

local function ws_drop(key, fields)
  ws_chunks(fields, function(...) redis.call('HDEL', key, ...) end)
end
