-- TairHash (exHash) keys: one key per counter, one field per bucket, and each
-- field expires on its own (see package tairhash for why every write is
-- EXHINCRBY with no TTL argument, then EXHPEXPIREAT with an absolute time).
-- The key gets no expiry of its own: it goes with its last field.

local WS_RESERVED = {}

local function ws_read(key) return redis.call('EXHGETALL', key) end

local function ws_get(key, field) return redis.call('EXHGET', key, field) end

local function ws_incr(L, key, B, delta)
  local v = redis.call('EXHINCRBY', key, B.field, delta)
  redis.call('EXHPEXPIREAT', key, B.field, ws_expiry(L.H, B.start + L.w))
  return v
end

local function ws_drop(key, fields)
  ws_chunks(fields, function(...) redis.call('EXHDEL', key, ...) end)
end

local function ws_ttls(key, fields, pttl)
  local out = {}
  for i = 1, #fields do out[i] = redis.call('EXHPTTL', key, fields[i]) end
  return out
end

-- ws_setx sets bucket B's field to v (a window extreme, see extreme.lua), and
-- its expiry, every time (as ws_incr does).
local function ws_setx(L, key, B, v, new)
  redis.call('EXHSET', key, B.field, v)
  redis.call('EXHPEXPIREAT', key, B.field, ws_expiry(L.H, B.start + L.w))
end
