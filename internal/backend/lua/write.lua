-- The Write script: a batch of write operations, one clock. After the header,
-- ARGV holds each operation's code and arguments, and KEYS its keys. Every
-- write is an event of event.lua; the shortest forms are parsed into one.
-- Package backend's Op constants (internal/backend/backend.go) list the
-- operations, their arguments and answers (a shape is "bucketms:windowms"; a
-- sum is an integer, or an exact decimal string beyond 2^53). The reply is
-- one flat array: per operation the number of its values, then the values;
-- -1 then an error where it failed (a reply pays for every table in it). The
-- error of a batch of one is the call's; an operation that cannot be parsed
-- ends the batch (the reply stops after its error).

ws_begin()
local H = ws_header(ARGV)
ws_tracefrom(ARGV[WS_HEADER])
local i, k, n = WS_HEADER + 1, 1, #ARGV
local out = {}
while i <= n do
  local m = #out
  out[m + 1] = 0
  local ok, ni, nk = pcall(ws_run, H, i, k, out)
  if ok then
    out[m + 1] = #out - m - 1
  else
    ws_abort()
    local e = ni
    for x = #out, m + 2, -1 do out[x] = nil end
    local parsed, pi, pk = pcall(ws_op, H, i, k) -- where the next one starts; one not parsed ends the batch
    ni, nk = parsed and pi or n + 1, pk
    if ni > n and m == 0 then error(e, 0) end -- the first, alone or ending the batch: its error is the call's
    out[m + 1], out[m + 2] = -1, ws_result(false, e)
  end
  i, k = ni, nk
end
return out
