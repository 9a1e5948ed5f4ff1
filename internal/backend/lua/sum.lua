-- The Sum script, read-only (a replica can run it): the sums of many
-- counters. After the header, ARGV holds one shape and one lookback (ms) per
-- counter (its keys: WS_KPC of KEYS, see ws_ckey), or a shape and a direction
-- (WS_X_MAX, WS_X_MIN, WS_X_RECENT) for a window extreme (one key, see
-- extreme.lua). The reply: each one's sum or extreme, or its error reply.

ws_begin()
local H = ws_header(ARGV)
ws_tracefrom(ARGV[WS_HEADER])
local out, k = {}, 1
for j = 1, (#ARGV - WS_HEADER) / 2 do
  local i = WS_HEADER + 2 * j - 1
  local a = ARGV[i + 1]
  if a == WS_X_MAX or a == WS_X_MIN or a == WS_X_RECENT then
    out[j] = ws_result(pcall(ws_xget, ws_shape(H, ARGV[i]), KEYS[k], a))
    k = k + 1
  else
    out[j] = ws_result(pcall(ws_sumover, ws_shape(H, ARGV[i]), ws_ckey(k, 0), tonumber(a)))
    k = k + WS_KPC
  end
end
return out
