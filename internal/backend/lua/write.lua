-- The Write script: a batch of write operations, one clock. After the header,
-- ARGV holds each operation's code and arguments, and KEYS its keys; "*r"
-- before one makes it r operations of those arguments over the keys that
-- follow (a run). Each is an event of event.lua. backend.Op* list the
-- operations, their arguments and answers (a shape is "bucketms:windowms"; a
-- sum is an integer, or an exact decimal string beyond 2^53). The reply is
-- one flat array: per operation the number of its values, then the values;
-- -1 then an error where it failed. The error of a batch of one is the
-- call's; one that cannot be parsed ends the batch.

ws_begin()
local H = ws_header(ARGV)
ws_tracefrom(H.trace)
local i, k, n, rep, m = WS_HEADER + 1, 1, #ARGV, 1, 0 -- (m: the values in out)
local out = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil} -- (room for 16 values: no rehash as it grows)
while i <= n do
  if rep == 1 and string.byte(ARGV[i]) == 42 then rep, i = tonumber(string.sub(ARGV[i], 2)), i + 1 end -- "*r" (not within a run)
  out[m + 1] = 0
  local ok, ni, nk = pcall(ws_run, H, i, k, out, m + 1)
  if ok then
    local e = #out
    out[m + 1], m = e - m - 1, e
  else
    ws_abort()
    local e = ws_named(ni)
    for x = #out, m + 2, -1 do out[x] = nil end
    local parsed, pi, pk = pcall(ws_op, H, i, k) -- where the next one starts; one not parsed ends the batch
    ni, nk, rep = parsed and pi or n + 1, pk, parsed and rep or 1
    if ni > n and m == 0 and rep == 1 then error(e, 0) end -- the first, alone or ending the batch: its error is the call's
    out[m + 1], out[m + 2], m = -1, ws_result(false, e), m + 2
  end
  if rep > 1 then rep, k = rep - 1, nk else i, k = ni, nk end
end
return out
