-- The Sum script, read-only: the sums of many counters. After the header,
-- ARGV holds one shape and one lookback (ms) per key, or a shape and a
-- direction (WS_X_MAX, WS_X_MIN, WS_X_RECENT) for a window extreme (see extreme.lua). The
-- reply has one entry per key: its sum over the lookback, or its extreme, or an
-- error reply where it failed. It writes nothing, so a replica can run it.

local H = ws_header(ARGV)
local out = {}
for k = 1, #KEYS do
  local i = WS_HEADER + 2 * k - 1
  local a = ARGV[i + 1]
  if a == WS_X_MAX or a == WS_X_MIN or a == WS_X_RECENT then
    out[k] = ws_result(pcall(ws_xget, ws_shape(H, ARGV[i]), KEYS[k], a))
  else
    out[k] = ws_result(pcall(ws_sumover, ws_shape(H, ARGV[i]), KEYS[k], tonumber(a)))
  end
end
return out
