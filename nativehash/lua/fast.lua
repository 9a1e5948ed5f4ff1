-- The plain hash's fast path beside event.lua's pipeline: an event without an
-- id or time of counts, limits that all admit, distinct adds and extremes
-- (Add, Allow, AllowAll, RecordStat, a feature set's Record), on counters
-- synced on the current bucket in their head; and an Allow's refusal. Any
-- other, or one it gives up on (having written nothing), takes the pipeline,
-- which answers and writes the same (TestFastPathDifferential).

-- ws_fcheck decides a cost (costs, a decimal string; cost, its number) under a
-- limit in the counter at KEYS[k] of window L, whose head Hd holds its record
-- at r, else where ws_hfind finds it. When it fits: the new total and bucket
-- value, C (a record not synced on the current bucket: ws_open's, prepared
-- for ws_commit) and the record's index; false, nil, C (if opened) and the
-- index when it does not; else nil. Reads only.
local function ws_fcheck(L, Hd, r, k, limit, costs, cost)
  if cost == nil or cost <= 0 or cost > limit or limit >= WS_BIG then return nil end
  local a = Hd.a
  if r > WS_REC * Hd.n or a[r] ~= L.b or a[r + 1] ~= L.w then r = ws_hfind(Hd, L) end
  if r ~= nil then
    -- (No ws_hcheck: m and c equal the clock's buckets, t and v are integers
    -- within bounds; any other record takes the pipeline, which checks it.)
    local t, v = a[r + 3], a[r + 5] + cost
    if a[r + 4] == L.cstart and a[r + 2] == L.low and t > -WS_BIG and v > cost - WS_BIG and v < WS_BIG and v ~= 0 and
        t % 1 == 0 and v % 1 == 0 then
      if t > limit - cost then return false, nil, nil, r end
      return t + cost, v, nil, r
    end
  end
  local C = ws_open(L, k, L.target)
  if not C.fits then return nil end
  if not ws_le(C.sum, limit - cost) then return false, nil, C, r end
  ws_prepare(L, C, costs, L.target)
  if tonumber(C.nv) == 0 then return nil end -- (the reset is then the other buckets': the pipeline's)
  return C.nsum, C.nv, C, r
end

-- Reused from call to call: ws_fd holds the counters opened whole, ws_fx the
-- distinct adds ({L, K, members, at: the answer's place, q: the group, P:
-- the plan}) and extremes ({L, key, X}), written once every item fits; ws_fP
-- a call's items as ws_limits lists them (a group's shapes false until
-- ws_frun needs them; for a distinct add or an extreme, cost false and limit
-- its first member's index in ARGV or its direction), ws_fB each group's end.
local ws_fd, ws_fx, ws_fP, ws_fB = {}, {}, {}, {}

-- ws_fback gives up: the heads read are forgotten (ws_begin), the answers past
-- out[o] dropped: the pipeline starts afresh, nothing written.
local function ws_fback(nd, out, o)
  ws_begin()
  ws_gq = nil
  for x = 1, nd do ws_fd[x] = false end
  for x = #out, o + 1, -1 do out[x] = nil end
  return nil
end

-- ws_frun runs ng groups of items P (group g's end at B[g]) from KEYS[k] in
-- one pass, the head kept while the key repeats, a record looked for first
-- where its item is: a synced record moves in its head at once (ws_fback
-- forgets the head); once every item fits, the distinct adds are planned,
-- written and counted, then the extremes and the counters opened whole are
-- written. It answers ni and the next k; nil, having written nothing, when
-- one does not fit. Its values go after out[o0]; an error names its group
-- (ws_gq), as the pipeline's does.
local function ws_frun(H, P, B, ng, ni, k, out, o0)
  local nd, nx, p, o, K = 0, 0, 1, o0, KEYS
  for g = 1, ng do
    if ng > 1 then ws_gq = g end
    out[o + 1], out[o + 2], o = 1, 0, o + 2
    local hk, Hd, q = nil, nil, 1 -- (q: the item's record in a head holding the group's windows in order)
    for px = p, B[g], 6 do
      local kind, L, limit, cost = P[px], P[px + 5], P[px + 2], P[px + 4]
      if not L or L.H ~= H then L = ws_shape(H, P[px + 1]) P[px + 5] = L end -- (a group's, or a list's of another header)
      if not cost and kind == WS_IT_EXTREME then
        local X = ws_xprepare(L, K[k], limit, P[px + 3], nil, L.target) -- (reads only: its answer now)
        ws_fx[nx + 1] = {L = L, key = K[k], X = X}
        out[o + 1], out[o + 2], o, k, nx = #X.best + 1, 1, o + 2, k + 1, nx + 1
        for y = 1, #X.best do out[o + y] = X.best[y] end
        o = o + #X.best
      elseif not cost then -- (a distinct add)
        local Kd, nk = ws_dk(L, k)
        ws_fx[nx + 1] = {L = L, K = Kd, members = ws_args(limit, limit + P[px + 3] - 1), at = o + 2, q = ws_gq, P = nil}
        out[o + 1], out[o + 2], o, k, nx = 1, 0, o + 2, nk, nx + 1
      else
        if K[k + 1] ~= hk then hk, Hd = K[k + 1], ws_hget(L, k) end
        local t, v, C, r = ws_fcheck(L, Hd, q, k, limit, P[px + 3], cost)
        if not t then return ws_fback(nd, out, o0) end
        if C ~= nil then
          ws_fd[nd + 1], ws_fd[nd + 2], ws_fd[nd + 3], nd = L, k, C, nd + 3
        else
          local A = Hd.a
          A[r + 3], A[r + 5], Hd.dirty = t, v, true
        end
        if kind == WS_IT_LIMIT then
          out[o + 1], out[o + 2], out[o + 3], o = 2, t, L.reset, o + 3 -- (an admitted limit: sum and reset)
        else
          out[o + 1], out[o + 2], o = 1, kind == WS_IT_QUIET and 0 or t, o + 2
        end
        k, q = k + WS_KPC, q + WS_REC
      end
    end
    p = B[g] + 1
  end
  if nx > 0 then -- the distinct adds, planned, written, then counted; the extremes written
    for x = 1, nx do
      local d = ws_fx[x]
      if not d.X then ws_gq = d.q d.P = ws_dplan(d.L, d.K, d.L.target) end
    end
    for x = 1, nx do
      local d = ws_fx[x]
      if not d.X then ws_dwrite(d.L, d.K, d.L.target, d.P, d.members) end
    end
    for x = 1, nx do
      local d = ws_fx[x]
      if d.X then ws_xcommit(d.L, d.key, d.X, d.L.target) else out[d.at] = ws_dcount(d.L, d.K, d.L.now - d.L.w) end
      ws_fx[x] = false
    end
  end
  ws_gq = nil
  for x = 1, nd, 3 do
    local L = ws_fd[x]
    ws_commit(L, ws_fd[x + 1], ws_fd[x + 2], L.target)
    ws_fd[x], ws_fd[x + 2] = false, false -- (nothing kept from one call to the next)
  end
  if ws_tracing ~= nil then ws_trace('fast') end
  return ni, k
end

-- ws_fast runs the operation at ARGV[i], KEYS[k] on the fast path if it takes
-- it, appending its values to out after out[o]: where the next operation
-- starts; nil, having written nothing, when it does not.
local function ws_fast(H, i, k, out, o)
  if ws_tracing ~= nil and ws_tracing.general then return nil end
  local op = ARGV[i]
  if op == WS_OP_ADD or op == WS_OP_ADDNOSUM or op == WS_OP_ALLOW then
    local limit, costs, ni = WS_BIG - 1, ARGV[i + 2], i + 3
    if op == WS_OP_ALLOW then limit, costs, ni = ws_tonum(ARGV[i + 2]), ARGV[i + 3], i + 4 end
    local L = ws_shape(H, ARGV[i + 1])
    local Hd = ws_hget(L, k)
    local nt, nv, C, j = ws_fcheck(L, Hd, 1, k, limit, costs, ws_tonum(costs))
    if nt == false and op == WS_OP_ALLOW then
      -- A refusal: the pipeline's retry and reset, from the counter's live buckets.
      local S = ws_detail(L, k, C)
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 0, C and C.sum or Hd.a[j + 3], ws_retry(L, S, ws_tonum(costs), limit), ws_reset(L, S)
      if ws_tracing ~= nil then ws_trace('refuse') end
      return ni, k + WS_KPC
    end
    if not nt then return nil end
    if C ~= nil then ws_commit(L, k, C, L.target) else Hd.a[j + 3], Hd.a[j + 5], Hd.dirty = nt, nv, true end
    if ws_tracing ~= nil then ws_trace('fast') end
    if op == WS_OP_ALLOW then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, nt, 0, L.reset
    else
      out[o + 1] = op == WS_OP_ADD and nt or 1
    end
    return ni, k + WS_KPC
  end
  if op == WS_OP_LIMITS then
    local P = ws_limits(H, ARGV[i + 1])
    ws_fB[1] = #P
    return ws_frun(H, P, ws_fB, 1, i + 2, k, out, o)
  end
  if op == WS_OP_DADD then
    local m, L = tonumber(ARGV[i + 2]), ws_shape(H, ARGV[i + 1])
    if m == nil or m < 1 then return nil end
    local Kd, nk = ws_dk(L, k)
    ws_dwrite(L, Kd, L.target, ws_dplan(L, Kd, L.target), ws_args(i + 3, i + 2 + m))
    out[o + 1] = ws_dcount(L, Kd, L.now - L.w)
    if ws_tracing ~= nil then ws_trace('fast') end
    return i + 3 + m, nk
  end
  if op == WS_OP_XADD then
    local L = ws_shape(H, ARGV[i + 1])
    local b = ws_xcommit(L, KEYS[k], ws_xprepare(L, KEYS[k], ARGV[i + 2], ARGV[i + 3], nil, L.target), L.target)
    for y = 1, #b do out[o + y] = b[y] end
    if ws_tracing ~= nil then ws_trace('fast') end
    return i + 4, k + 1
  end
  if op ~= WS_OP_GROUP and op ~= WS_OP_LINK then return nil end
  -- The groups' items into ws_fP, each group without an id or time, each
  -- item a count or a limit of a cost ws_fcheck takes (tested before any
  -- read), a distinct add or an extreme.
  local ng, a, P, x = 1, i + 1, ws_fP, 0
  if op == WS_OP_LINK then ng, a = ws_tonum(ARGV[i + 1]), i + 2 end
  for g = 1, ng do
    if ARGV[a + 1] ~= '' or ARGV[a + 3] ~= '' then return nil end
    local n = ws_tonum(ARGV[a])
    a = a + 4
    for _ = 1, n do
      local kind, limit, costs, na, cost = ARGV[a], WS_BIG - 1, ARGV[a + 2], a + 3, nil
      if kind == WS_IT_LIMIT then
        limit, costs, na = ws_tonum(costs), ARGV[a + 3], a + 4
      elseif kind == WS_IT_DISTINCT then
        local m = tonumber(costs) -- (its number of members; none: a read, the pipeline's)
        if m == nil or m < 1 then return nil end
        limit, costs, na, cost = a + 3, m, a + 3 + m, false
      elseif kind == WS_IT_EXTREME then
        limit, costs, na, cost = costs, ARGV[a + 3], a + 4, false -- (its direction, its value)
      elseif kind ~= WS_IT_COUNT and kind ~= WS_IT_QUIET and kind ~= WS_IT_IFOK then
        return nil
      end
      if cost == nil then cost = ws_tonum(costs) end
      if cost ~= false and (cost == nil or cost <= 0 or cost > limit or limit >= WS_BIG) then return nil end
      P[x + 1], P[x + 2], P[x + 3], P[x + 4], P[x + 5], P[x + 6] = kind, ARGV[a + 1], limit, costs, cost, false
      x, a = x + 6, na
    end
    ws_fB[g] = x
  end
  return ws_frun(H, P, ws_fB, ng, a, k, out, o)
end
