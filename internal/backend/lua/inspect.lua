-- The Inspect script, read-only: every field of one counter as the server
-- holds it. After the header, ARGV holds the counter's shape. The reply is
-- {now, key pttl, field, value, ttl, field, value, ttl, ...}; a key that
-- holds something other than a counter is refused as the writes refuse it.

local H = ws_header(ARGV)
local key = KEYS[1]
local L = ws_shape(H, ARGV[WS_HEADER + 1])
local all = ws_read(key)
ws_scan(L, all, L.now - L.w, false)
local pttl = redis.call('PTTL', key)
local fields = {}
for i = 1, #all, 2 do fields[#fields + 1] = all[i] end
local ttls = ws_ttls(key, fields, pttl)
local out = {L.now, pttl}
for i = 1, #all, 2 do
  out[#out + 1] = all[i]
  out[#out + 1] = all[i + 1]
  out[#out + 1] = ttls[(i + 1) / 2]
end
return out
