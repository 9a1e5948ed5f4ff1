-- The plain native hash, for servers without hash-field TTL: fields never
-- expire on their own. Besides the buckets, the hash keeps a running total
-- (see plain.lua) in the reserved fields m and t.

local WS_RESERVED = {m = true, t = true}

-- ws_touch makes the key expire when bucket B leaves the window, after a
-- write created B: the newest bucket sets it; an earlier (late) one may only
-- extend it.
local function ws_touch(L, key, B)
  local at = ws_expiry(L.H, B.start + L.w)
  if not B.current then
    local pttl = redis.call('PTTL', key)
    if pttl >= 0 and ws_expiry(L.H, L.now) + pttl >= at then return end
  end
  redis.call('PEXPIREAT', key, at)
end

-- No field has a TTL of its own: each lives as long as the key.
local function ws_ttls(key, fields, pttl)
  local out = {}
  for i = 1, #fields do out[i] = pttl end
  return out
end

-- ws_get reads one field (HMGET, which the plain hash's rule allows).
local function ws_get(key, field) return redis.call('HMGET', key, field)[1] end

-- ws_setx sets bucket B's field to v (a window extreme, see extreme.lua); a
-- new field sets the key's expiry as a counter's new bucket does.
local function ws_setx(L, key, B, v, new)
  redis.call('HSET', key, B.field, v)
  if new then ws_touch(L, key, B) end
end
