-- The Inspect script, read-only: every field of one counter as the server
-- holds it. After the header, ARGV holds the counter's shape. The reply is
-- {now, key pttl, field, value, ttl, field, value, ttl, ...}, the bucket
-- fields first (with the plain hash, the current bucket's value as its head
-- holds it), then the backend's reserved fields (ttl -1); a key that holds
-- something other than a counter is refused as the writes refuse it.

ws_begin()
local H = ws_header(ARGV)
local key = ws_ckey(1, 0)
local L = ws_shape(H, ARGV[WS_HEADER + 1])
local all = ws_read(key, L)
ws_scan(L, all, L.now - L.w, false)
local pttl = ws_life(key)
local fields = {}
for i = 1, #all, 2 do fields[#fields + 1] = all[i] end
local ttls = ws_ttls(key, fields, pttl)
local out = {L.now, pttl}
for i = 1, #all, 2 do
  out[#out + 1] = all[i]
  out[#out + 1] = all[i + 1]
  out[#out + 1] = ttls[(i + 1) / 2]
end
-- The backend's own state of the counter, as reserved fields (the plain
-- hash's running total and its mark: see ws_meta).
local meta = ws_meta(L, key)
for i = 1, #meta, 2 do
  out[#out + 1] = meta[i]
  out[#out + 1] = meta[i + 1]
  out[#out + 1] = -1
end
return out
