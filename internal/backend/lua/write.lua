-- The Write script: a batch of write operations, one clock. After the header,
-- ARGV holds each operation's code and arguments, and KEYS its keys:
--
--   WS_OP_ADD      shape delta          Add: the new window sum
--   WS_OP_ADDNOSUM shape delta          AddNoSum: 1
--   WS_OP_ALLOW    shape limit cost     Allow: {allowed, sum, retry ms, reset ms}
--   WS_OP_GROUP    (see group.lua)      several counters of one slot at once
--   WS_OP_LIMITS   n cost policies      a group of n limits of one cost
--                                       alone, compact (policies: each
--                                       limit's shape and limit, in one
--                                       argument, see ws_policies):
--                                       {1, sum, reset...} when each is on
--                                       its fast path, else a group's
--                                       answer (see ws_wlimits)
--   WS_OP_LIMITSH  n cost policies      the same, of counters that share
--                                       one head (the plain hash): their n
--                                       hashes, then the head, declared
--                                       once (see ws_hlimits)
--   WS_OP_LINK, WS_OP_RESERVE, WS_OP_UNDO
--                  (see group.lua)      linked groups, all or nothing
--   WS_OP_XPUT     shape dir value time a window extreme's write: {extreme}
--                                       (see extreme.lua)
--   WS_OP_DCOUNT   shape lookback       a distinct count over the lookback
--                                       (PFCOUNT is a write to Redis, so it
--                                       runs here, though it changes no
--                                       count); its keys: see ws_dk in
--                                       distinct.lua
--   WS_OP_DADD     shape n member...    AddDistinct: add the n members to the
--                                       current bucket's HyperLogLog and
--                                       answer the window's count; its keys
--                                       as WS_OP_DCOUNT's (a group's distinct
--                                       item without the group's machinery)
--
-- (a shape is "bucketms:windowms"; a sum is an integer, or an exact decimal
-- string beyond 2^53). The reply has one entry per operation: its answer, or
-- an error reply where it failed. One operation failing does not stop the
-- others; a batch of one runs without pcall.

ws_begin()
local H = ws_header(ARGV)

-- ws_onlylimits reports whether the n items of a group from ARGV[i] on are
-- all limits (and there is one at least): such a group runs as ws_limits.
local function ws_onlylimits(i, n)
  if n == nil or n < 1 then return false end
  for j = 0, n - 1 do
    if ARGV[i + 4 * j] ~= WS_IT_LIMIT then return false end
  end
  return true
end

-- ws_linkedlimits reads the n groups of a link from ARGV[i] and KEYS[k]
-- when they are all limits without an event id or time, for ws_linklimits:
-- each group's first item and key and its number of items, and where the
-- next operation starts in each; nil otherwise.
local function ws_linkedlimits(i, k, n)
  local gs = {}
  for j = 1, n do
    local m = ws_tonum(ARGV[i])
    if ARGV[i + 1] ~= '' or ARGV[i + 3] ~= '' or not ws_onlylimits(i + 4, m) then return nil end
    gs[j] = {i = i + 4, k = k, n = m}
    i, k = i + 4 + 4 * m, k + WS_KPC * m
  end
  return gs, i, k
end

-- ws_op reads the operation at ARGV[i] and KEYS[k]: where the next one starts,
-- and the function to run with its arguments.
local function ws_op(i, k)
  local op, key = ARGV[i], KEYS[k]
  if op == WS_OP_ADD then
    local L = ws_shape(H, ARGV[i + 1])
    return i + 3, k + WS_KPC, ws_add, L, ws_ckey(k, 0), ARGV[i + 2]
  elseif op == WS_OP_ADDNOSUM then
    local L = ws_shape(H, ARGV[i + 1])
    return i + 3, k + WS_KPC, ws_addquiet, L, ws_ckey(k, 0), ARGV[i + 2]
  elseif op == WS_OP_ALLOW then
    return i + 4, k + WS_KPC, ws_allow, ws_shape(H, ARGV[i + 1]), ws_ckey(k, 0), ws_tonum(ARGV[i + 2]), ARGV[i + 3]
  elseif op == WS_OP_GROUP and ARGV[i + 2] == '' and ARGV[i + 4] == '' and ws_onlylimits(i + 5, ws_tonum(ARGV[i + 1])) then
    local n = ws_tonum(ARGV[i + 1])
    return i + 5 + 4 * n, k + WS_KPC * n, ws_limits, H, i + 5, k, n
  elseif op == WS_OP_LIMITS then
    local n = ws_tonum(ARGV[i + 1])
    return i + 4, k + WS_KPC * n, ws_wlimits, H, ws_policies(ARGV[i + 3], n), ARGV[i + 2], k, n
  elseif op == WS_OP_LIMITSH then
    local n = ws_tonum(ARGV[i + 1])
    return i + 4, k + n + 1, ws_hlimits, H, ws_policies(ARGV[i + 3], n), ARGV[i + 2], k, n
  elseif op == WS_OP_GROUP or op == WS_OP_RESERVE then
    if op == WS_OP_GROUP then
      local ni, nk, its, idkey = ws_readfast(H, i + 1, k)
      if ni ~= nil then return ni, nk, ws_fastgroup, H, i + 1, k, its, idkey end
    end
    local ni, nk, G = ws_readgroup(H, i + 1, k)
    G.reserve = op == WS_OP_RESERVE
    return ni, nk, ws_group, G
  elseif op == WS_OP_LINK then
    local gs, li, lk = ws_linkedlimits(i + 2, k, ws_tonum(ARGV[i + 1]))
    if gs ~= nil then return li, lk, ws_linklimits, H, gs end
    local Gs, ni, nk = {}, i + 2, k
    for j = 1, tonumber(ARGV[i + 1]) do
      -- A group without an event id runs as ws_fastgroup when it can (see
      -- ws_link); ws_readfast answers nil otherwise.
      local fi, fk, its = nil, nil, nil
      if ARGV[ni + 1] == '' then fi, fk, its = ws_readfast(H, ni, nk) end
      if fi ~= nil then
        Gs[j] = {fast = its, H = H, i = ni, k = nk, reserve = nil, ok = nil, now = nil}
        ni, nk = fi, fk
      else
        ni, nk, Gs[j] = ws_readgroup(H, ni, nk)
      end
    end
    return ni, nk, ws_link, Gs
  elseif op == WS_OP_UNDO then
    local ni, nk, G = ws_readgroup(H, i + 1, k)
    return ni, nk, ws_undo, G
  elseif op == WS_OP_XPUT then
    local e = ARGV[i + 4]
    if e == '' then e = nil else e = tonumber(e) end
    return i + 5, k + 1, ws_xput, ws_shape(H, ARGV[i + 1]), key, ARGV[i + 2], ARGV[i + 3], e
  elseif op == WS_OP_DADD then
    local L, m = ws_shape(H, ARGV[i + 1]), tonumber(ARGV[i + 2])
    local K, nk = ws_dk(L, k)
    return i + 3 + m, nk, ws_daddcount, L, K, ws_args(i + 3, i + 2 + m)
  elseif op == WS_OP_DCOUNT then
    local L = ws_shape(H, ARGV[i + 1])
    local K, nk = ws_dk(L, k)
    return i + 3, nk, ws_dcount, L, K, L.now - tonumber(ARGV[i + 2])
  end
  ws_err(WS_E_ARGS, 'unknown operation ' .. tostring(op))
end

-- ws_do runs an operation, then writes what it left for its end (the plain
-- hash's heads: ws_end).
local function ws_do(fn, a1, a2, a3, a4, a5)
  local r = fn(a1, a2, a3, a4, a5)
  ws_end()
  return r
end

local i, k, n = WS_HEADER + 1, 1, #ARGV
local ni, nk, fn, a1, a2, a3, a4, a5 = ws_op(i, k)
if ni > n then
  return {ws_do(fn, a1, a2, a3, a4, a5)}
end
local out, j = {}, 1
while true do
  local ok, r = pcall(ws_do, fn, a1, a2, a3, a4, a5)
  if not ok then ws_abort() end
  out[j] = ws_result(ok, r)
  j, i, k = j + 1, ni, nk
  if i > n then break end
  ni, nk, fn, a1, a2, a3, a4, a5 = ws_op(i, k)
end
return out
