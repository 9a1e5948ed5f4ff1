-- The Sum script, read-only (a replica can run it): the sums of many
-- counters. After the header, ARGV holds a shape and a lookback (ms) per
-- counter (WS_KPC keys, see ws_ckey), or a shape and a direction (WS_X_MAX,
-- WS_X_MIN, WS_X_RECENT) for a window extreme (one key, extreme.lua); "*r"
-- before a pair makes it r counters' (a run). The reply: each one's sum,
-- extreme or error reply. ws_sumrun, if any, reads a run of window sums.

ws_begin()
local H = ws_header(ARGV)
ws_tracefrom(H.trace)
local out, k, j, i = {}, 1, 1, WS_HEADER + 1
while i <= #ARGV do
  local r, s = 1, ARGV[i]
  if string.byte(s) == 42 then r, i = tonumber(string.sub(s, 2)), i + 1; s = ARGV[i] end -- "*r"
  local a, L = ARGV[i + 1], ws_shape(H, s)
  if a == WS_X_MAX or a == WS_X_MIN or a == WS_X_RECENT then
    for x = 0, r - 1 do out[j + x] = ws_result(pcall(ws_xget, L, KEYS[k + x], a)) end
    k = k + r
  else
    local lb = tonumber(a)
    if ws_sumrun ~= nil and lb == L.w and not (ws_tracing and ws_tracing.general) then
      ws_sumrun(L, k, r, out, j)
    else
      for x = 0, r - 1 do out[j + x] = ws_result(pcall(ws_sumover, L, ws_ckey(k + WS_KPC * x, 0), lb)) end
    end
    k = k + WS_KPC * r
  end
  i, j = i + 2, j + r
end
return out
