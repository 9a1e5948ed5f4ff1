-- The Sum script, read-only (a replica can run it): the sums of many
-- counters. After the header, ARGV holds one shape and one lookback (ms) per
-- counter (its keys: WS_KPC of KEYS, see ws_ckey), or a shape and a direction
-- (WS_X_MAX, WS_X_MIN, WS_X_RECENT) for a window extreme (one key, see
-- extreme.lua). The reply: each one's sum or extreme, or its error reply. A
-- run of sums of one shape over its whole window goes to ws_sumrun, if the
-- backend has one (the plain hash: their heads in one MGET).

ws_begin()
local H = ws_header(ARGV)
ws_tracefrom(ARGV[WS_HEADER])
local out, k, j, n = {}, 1, 1, (#ARGV - WS_HEADER) / 2
while j <= n do
  local i = WS_HEADER + 2 * j - 1
  local s, a = ARGV[i], ARGV[i + 1]
  if a == WS_X_MAX or a == WS_X_MIN or a == WS_X_RECENT then
    out[j] = ws_result(pcall(ws_xget, ws_shape(H, s), KEYS[k], a))
    k, j = k + 1, j + 1
  else
    local L, lb, r = ws_shape(H, s), tonumber(a), 1
    if ws_sumrun ~= nil and lb == L.w and not (ws_tracing and ws_tracing.general) then
      while j + r <= n and ARGV[i + 2 * r] == s and ARGV[i + 2 * r + 1] == a do r = r + 1 end
      ws_sumrun(L, k, r, out, j)
    else
      out[j] = ws_result(pcall(ws_sumover, L, ws_ckey(k, 0), lb))
    end
    k, j = k + WS_KPC * r, j + r
  end
end
return out
