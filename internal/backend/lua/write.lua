-- The Write script: a batch of write operations, one clock. After the header,
-- ARGV holds each operation's code and arguments, and KEYS its keys. Every
-- write is an event of event.lua; the shortest forms are parsed into one:
--
--   WS_OP_ADD      shape delta          Add: the new window sum
--   WS_OP_ADDNOSUM shape delta          AddNoSum: 1
--   WS_OP_ALLOW    shape limit cost     Allow: allowed, sum, retry ms, reset ms
--   WS_OP_DADD     shape n member...    AddDistinct: the window's count
--   WS_OP_GROUP, WS_OP_LINK, WS_OP_CHECK, WS_OP_RESERVE, WS_OP_UNDO, WS_OP_SETTLE
--                  (see event.lua)
--   WS_OP_PATHS    tag                  the paths traced under tag (tests)
--   WS_OP_DCOUNT   shape lookback       a distinct count over the lookback
--                                       (PFCOUNT is a write command)
--
-- (a shape is "bucketms:windowms"; a sum is an integer, or an exact decimal
-- string beyond 2^53). The reply is one flat array: per operation the number
-- of its values, then the values; -1 then an error where it failed (a reply
-- pays for every table in it). The error of a batch of one is the call's.

ws_begin()
local H = ws_header(ARGV)
ws_tracefrom(ARGV[WS_HEADER])

-- ws_one is a group of one item, the short forms' event.
local function ws_one(kind, L, key, delta, limit)
  local G, it = ws_newgroup(H), ws_item(kind, L, key, delta)
  if kind == WS_IT_LIMIT then it.limit, it.cost = limit, ws_tonum(delta) end
  G.items[1] = it
  return G
end

-- The operations of the pipeline: each appends its values to out.
local function ws_add(G, out) out[#out + 1] = ws_group(G, {})[4] end
local function ws_addquiet(G, out) out[#out + 1] = ws_group(G, {}) and 1 end
local function ws_allow(G, out)
  local r, n = ws_group(G, {}), #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = r[1] % 2, r[4], r[5], r[6]
end
local function ws_checkonly(G, out)
  ws_event({G}, false, true)
  out[#out + 1] = 1
end
local function ws_reserve(G, out) ws_event({G}, true, false, out) end
local function ws_link(Gs, out) ws_event(Gs, false, false, out) end
local function ws_one1(fn) return function(G, out) out[#out + 1] = fn(G) end end

-- ws_op reads the operation at ARGV[i] and KEYS[k]: where the next one starts,
-- and the function to run with its argument.
local function ws_op(i, k)
  local op = ARGV[i]
  if op == WS_OP_ADD or op == WS_OP_ADDNOSUM then
    local G = ws_one(op == WS_OP_ADD and WS_IT_COUNT or WS_IT_QUIET, ws_shape(H, ARGV[i + 1]), ws_ckey(k, 0), ARGV[i + 2])
    return i + 3, k + WS_KPC, op == WS_OP_ADD and ws_add or ws_addquiet, G
  elseif op == WS_OP_ALLOW then
    local G = ws_one(WS_IT_LIMIT, ws_shape(H, ARGV[i + 1]), ws_ckey(k, 0), ARGV[i + 3], ws_tonum(ARGV[i + 2]))
    return i + 4, k + WS_KPC, ws_allow, G
  elseif op == WS_OP_DADD then
    local L, m = ws_shape(H, ARGV[i + 1]), tonumber(ARGV[i + 2])
    local G = ws_one(WS_IT_DISTINCT, L, KEYS[k], nil)
    local nk
    G.items[1].members, G.items[1].K, nk = ws_args(i + 3, i + 2 + m), ws_dk(L, k)
    return i + 3 + m, nk, ws_add, G
  elseif op == WS_OP_GROUP or op == WS_OP_CHECK then
    local ni, nk, G = ws_parse(H, i + 1, k)
    G.check = op == WS_OP_CHECK
    return ni, nk, op == WS_OP_GROUP and ws_group or ws_checkonly, G
  elseif op == WS_OP_RESERVE or op == WS_OP_UNDO or op == WS_OP_SETTLE then
    local ni, nk, G = ws_parse(H, i + 2, k)
    G.nonce = ARGV[i + 1]
    local fn = ws_reserve
    if op == WS_OP_UNDO then fn = ws_one1(ws_undo) elseif op == WS_OP_SETTLE then fn = ws_one1(ws_settle) end
    return ni, nk, fn, G
  elseif op == WS_OP_LINK then
    local Gs, ni, nk = {}, i + 2, k
    for j = 1, tonumber(ARGV[i + 1]) do ni, nk, Gs[j] = ws_parse(H, ni, nk) end
    return ni, nk, ws_link, Gs
  elseif op == WS_OP_PATHS then
    local tag = ARGV[i + 1]
    return i + 2, k, function(_, out)
      for p, c in pairs(ws_traces[tag] or {}) do out[#out + 1], out[#out + 2] = p, c end
      ws_traces[tag] = nil
    end, nil
  elseif op == WS_OP_DCOUNT then
    local L = ws_shape(H, ARGV[i + 1])
    local K, nk = ws_dk(L, k)
    return i + 3, nk, function(a, out) out[#out + 1] = ws_dcount(L, a, L.now - tonumber(ARGV[i + 2])) end, K
  end
  ws_err(WS_E_ARGS, 'unknown operation ' .. tostring(op))
end

-- ws_run runs the operation at ARGV[i] and KEYS[k], appending its values to
-- out, on the backend's fast path when it takes it
-- (nativehash/lua/fast.lua), else through the pipeline, then writes what it
-- left for its end (the plain hash's heads: ws_end). It answers where the
-- next operation starts.
local function ws_run(i, k, out)
  if ws_fast ~= nil then
    local ni, nk = ws_fast(H, i, k, out)
    if ni ~= nil then
      ws_end()
      return ni, nk
    end
  end
  local ni, nk, fn, a = ws_op(i, k)
  fn(a, out)
  ws_end()
  return ni, nk
end

local i, k, n = WS_HEADER + 1, 1, #ARGV
local out = {}
while i <= n do
  local m = #out
  out[m + 1] = 0
  local ok, ni, nk = pcall(ws_run, i, k, out)
  if ok then
    out[m + 1] = #out - m - 1
  else
    ws_abort()
    local e = ni
    for x = #out, m + 2, -1 do out[x] = nil end
    ni, nk = ws_op(i, k) -- (where the next operation starts)
    if ni > n and m == 0 then error(e, 0) end -- a batch of one: its error is the call's
    out[m + 1], out[m + 2] = -1, ws_result(false, e)
  end
  i, k = ni, nk
end
return out
