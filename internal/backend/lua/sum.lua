-- The Sum script, read-only: the sums of many counters. After the header,
-- ARGV holds one shape and one lookback (ms) per key. The reply has one entry
-- per key: its sum over the lookback, or an error reply where it failed. It
-- writes nothing, so a replica can run it.

local H = ws_header(ARGV)
local out = {}
for k = 1, #KEYS do
  local i = WS_HEADER + 2 * k - 1
  out[k] = ws_result(pcall(ws_sumover, ws_shape(H, ARGV[i]), KEYS[k], tonumber(ARGV[i + 1])))
end
return out
