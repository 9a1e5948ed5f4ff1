-- The plain hash's fast path beside event.lua's pipeline: an event of counts
-- and limits without an id or time (Add, Allow, AllowAll) whose every limit
-- admits, on counters synced on the current bucket in their head, no table
-- per item; and an Allow's refusal, which writes nothing. Any other, or one
-- it gives up on (having written nothing), takes the pipeline, which answers
-- and writes the same (TestFastPathDifferential).

-- ws_fcheck decides a cost (costs, a decimal string; cost, its number) under a
-- limit in the counter at KEYS[k] of window L, whose head Hd holds its record
-- at i (nil: none). When it fits: the new total and bucket value, and for a
-- record not synced on the current bucket the counter's state C from ws_open,
-- prepared (ws_commit writes it); false (and C, if opened) when it does not
-- fit; else nil. Reads only.
local function ws_fcheck(L, Hd, i, k, limit, costs, cost)
  if cost == nil or cost <= 0 or cost > limit or limit >= WS_BIG then return nil end
  if i ~= nil then
    -- (No ws_hcheck: m and c equal the clock's buckets, t and v are integers
    -- within bounds; any other record takes the pipeline, which checks it.)
    local a = Hd.a
    local t, v = a[i + 3], a[i + 5]
    if a[i + 4] == L.cstart and a[i + 2] == L.low and t > -WS_BIG and v > -WS_BIG and v + cost < WS_BIG and v + cost ~= 0 and
        t % 1 == 0 and v % 1 == 0 then
      if t > limit - cost then return false end
      return t + cost, v + cost, nil
    end
  end
  local C = ws_open(L, k, L.target)
  if not C.fits then return nil end
  if not ws_le(C.sum, limit - cost) then return false, nil, C end
  ws_prepare(L, C, costs, L.target)
  if tonumber(C.nv) == 0 then return nil end -- (the reset is then the other buckets': the pipeline's)
  return C.nsum, C.nv, C
end

-- Reused from call to call: ws_fu holds what undoes each record moved in its
-- head (head, record, the cost added to t and v: exact below 2^53); ws_fd the
-- counters opened whole, written once every item is decided; ws_fP the items
-- of an operation's groups as ws_limits lists them (kind, shape, limit, cost
-- as sent, cost), ws_fB where each group's end.
local ws_fu, ws_fd, ws_fP, ws_fB = {}, {}, {}, {}

-- ws_fback gives up: the records moved (nu entries of ws_fu) put back, their
-- heads clean again (as at an operation's start), the answers past out[o]
-- dropped, so the pipeline starts afresh with nothing written.
local function ws_fback(nu, nd, out, o)
  local u = ws_fu
  for x = 1, nu, 3 do
    local Hd, r, c, a = u[x], u[x + 1], u[x + 2], u[x].a
    a[r + 3], a[r + 5], Hd.dirty = a[r + 3] - c, a[r + 5] - c, false
  end
  for x = 1, nd do ws_fd[x] = false end
  for x = #out, o + 1, -1 do out[x] = nil end
  return nil
end

-- ws_frun runs ng groups of items P (group g's end at B[g]) from KEYS[k] in
-- one pass, the head kept while the key repeats, a record looked for first
-- where its item is: a synced record moves in its head at once (ws_fback
-- undoes it), a counter opened whole is written after the last item. It
-- answers ni and the next k; nil, having written nothing, when one does not fit.
local function ws_frun(H, P, B, ng, ni, k, out)
  local o0, nu, nd, u, p, o = #out, 0, 0, ws_fu, 1, #out
  for g = 1, ng do
    out[o + 1], out[o + 2], o = 1, 0, o + 2
    local hk, Hd = nil, nil
    for px = p, B[g], 5 do
      local kind, L, limit, cost = P[px], ws_shape(H, P[px + 1]), P[px + 2], P[px + 4]
      if KEYS[k + 1] ~= hk then hk, Hd = KEYS[k + 1], ws_hget(L, k) end
      local A, r = Hd.a, (px - p) / 5 * WS_REC + 1
      if r > WS_REC * Hd.n or A[r] ~= L.b or A[r + 1] ~= L.w then r = ws_hfind(Hd, L) end
      local t, v, C = ws_fcheck(L, Hd, r, k, limit, P[px + 3], cost)
      if not t then return ws_fback(nu, nd, out, o0) end
      if C ~= nil then
        ws_fd[nd + 1], ws_fd[nd + 2], ws_fd[nd + 3], nd = L, k, C, nd + 3
      else
        u[nu + 1], u[nu + 2], u[nu + 3], nu = Hd, r, t - A[r + 3], nu + 3
        A[r + 3], A[r + 5], Hd.dirty = t, v, true
      end
      if kind == WS_IT_LIMIT then
        out[o + 1], out[o + 2], out[o + 3], o = 2, t, L.reset, o + 3 -- (an admitted limit: sum and reset)
      else
        out[o + 1], out[o + 2], o = 1, kind == WS_IT_QUIET and 0 or t, o + 2
      end
      k = k + WS_KPC
    end
    p = B[g] + 1
  end
  for x = 1, nd, 3 do
    local L = ws_fd[x]
    ws_commit(L, ws_fd[x + 1], ws_fd[x + 2], L.target)
    ws_fd[x], ws_fd[x + 2] = false, false -- (nothing kept from one call to the next)
  end
  if ws_tracing ~= nil then ws_trace('fast') end
  return ni, k
end

-- ws_fast runs the operation at ARGV[i], KEYS[k] on the fast path if it takes
-- it, appending its values to out: where the next operation starts; nil,
-- having written nothing, when it does not.
local function ws_fast(H, i, k, out)
  if ws_tracing ~= nil and ws_tracing.general then return nil end
  local op, o = ARGV[i], #out
  if op == WS_OP_ADD or op == WS_OP_ADDNOSUM or op == WS_OP_ALLOW then
    local limit, costs, ni = WS_BIG - 1, ARGV[i + 2], i + 3
    if op == WS_OP_ALLOW then limit, costs, ni = ws_tonum(ARGV[i + 2]), ARGV[i + 3], i + 4 end
    local L = ws_shape(H, ARGV[i + 1])
    local Hd = ws_hget(L, k)
    local j = ws_hfind(Hd, L)
    local nt, nv, C = ws_fcheck(L, Hd, j, k, limit, costs, ws_tonum(costs))
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
    local P = ws_limits(ARGV[i + 1])
    ws_fB[1] = #P
    return ws_frun(H, P, ws_fB, 1, i + 2, k, out)
  end
  if op ~= WS_OP_GROUP and op ~= WS_OP_LINK then return nil end
  -- The groups' items into ws_fP, each group without an id or time, each
  -- item a count or a limit.
  local ng, a, P, x = 1, i + 1, ws_fP, 0
  if op == WS_OP_LINK then ng, a = ws_tonum(ARGV[i + 1]), i + 2 end
  for g = 1, ng do
    if ARGV[a + 1] ~= '' or ARGV[a + 3] ~= '' then return nil end
    local n = ws_tonum(ARGV[a])
    a = a + 4
    for _ = 1, n do
      local kind, limit, costs, na = ARGV[a], WS_BIG - 1, ARGV[a + 2], a + 3
      if kind == WS_IT_LIMIT then
        limit, costs, na = ws_tonum(costs), ARGV[a + 3], a + 4
      elseif kind ~= WS_IT_COUNT and kind ~= WS_IT_QUIET and kind ~= WS_IT_IFOK then
        return nil
      end
      P[x + 1], P[x + 2], P[x + 3], P[x + 4], P[x + 5], x, a = kind, ARGV[a + 1], limit, costs, ws_tonum(costs), x + 5, na
    end
    ws_fB[g] = x
  end
  return ws_frun(H, P, ws_fB, ng, a, k, out)
end
