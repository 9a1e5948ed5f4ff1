-- The plain hash's fast path beside event.lua's pipeline: an event of counts
-- and limits without an id or time (Add, Allow, AllowAll) whose every limit
-- admits, on counters synced on the current bucket in their head, no table
-- per item. Any other, or one it gives up on (having written nothing), takes
-- the pipeline, which answers and writes the same (TestFastPathDifferential).

-- ws_fcheck decides a cost (costs, a decimal string; cost, its number) under a
-- limit in the counter at KEYS[k] of window shape. When it fits: the window L,
-- the head Hd, its record i, the new total and bucket value (nt, nv), and for
-- a record not synced on the current bucket the counter's state C from
-- ws_open, prepared (ws_commit writes it); else nil. Reads only.
local function ws_fcheck(H, shape, k, limit, costs, cost)
  if cost == nil or cost <= 0 or cost > limit or limit >= WS_BIG then return nil end
  local L = ws_shape(H, shape)
  local Hd = ws_hget(L, k)
  local i = ws_hfind(Hd, L)
  if i ~= nil then
    -- (No ws_hcheck: m and c equal the clock's buckets, t and v are integers
    -- within bounds; any other record takes the pipeline, which checks it.)
    local a, t, v = Hd.a, Hd.a[i + 3], Hd.a[i + 5]
    if a[i + 4] == L.cstart and a[i + 2] == L.low and t > -WS_BIG and v > -WS_BIG and v + cost < WS_BIG and v + cost ~= 0 and
        t % 1 == 0 and v % 1 == 0 then
      if t > limit - cost then return nil end
      return L, Hd, i, t + cost, v + cost, nil
    end
  end
  local C = ws_open(L, k, L.target)
  if not (C.fits and ws_le(C.sum, limit - cost)) then return nil end
  ws_prepare(L, C, costs, L.target)
  if tonumber(C.nv) == 0 then return nil end -- (the reset is then the other buckets': the pipeline's)
  return L, Hd, i, C.nsum, C.nv, C
end

-- ws_fu holds what undoes each record moved in its head (head, record, the
-- cost added to t and v: exact on integers below 2^53); ws_fd the counters
-- opened whole, written once every item is decided. Reused from call to call.
local ws_fu, ws_fd = {}, {}

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

-- ws_fast runs the operation at ARGV[i], KEYS[k] on the fast path if it takes
-- it, appending its values to out: where the next operation starts; nil,
-- having written nothing, when it does not.
local function ws_fast(H, i, k, out)
  if ws_tracing ~= nil and ws_tracing.general then return nil end
  local op, o = ARGV[i], #out
  if op == WS_OP_ADD or op == WS_OP_ADDNOSUM or op == WS_OP_ALLOW then
    local limit, costs, ni = WS_BIG - 1, ARGV[i + 2], i + 3
    if op == WS_OP_ALLOW then limit, costs, ni = ws_tonum(ARGV[i + 2]), ARGV[i + 3], i + 4 end
    local L, Hd, j, nt, nv, C = ws_fcheck(H, ARGV[i + 1], k, limit, costs, ws_tonum(costs))
    if L == nil then return nil end
    if C ~= nil then ws_commit(L, k, C, L.target) else Hd.a[j + 3], Hd.a[j + 5], Hd.dirty = nt, nv, true end
    if ws_tracing ~= nil then ws_trace('fast') end
    if op == WS_OP_ALLOW then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, nt, 0, L.reset
    else
      out[o + 1] = op == WS_OP_ADD and nt or 1
    end
    return ni, k + WS_KPC
  end
  if op ~= WS_OP_GROUP and op ~= WS_OP_LINK and op ~= WS_OP_LIMITS then return nil end
  local ng, a, P = 1, i + 1, nil
  if op == WS_OP_LINK then ng, a = ws_tonum(ARGV[i + 1]), i + 2 elseif op == WS_OP_LIMITS then P = ws_limits(ARGV[a]) end
  -- First, whether every group and item is the fast path's (reads ARGV only).
  local b = a
  for _ = 1, P == nil and ng or 0 do
    if ARGV[b + 1] ~= '' or ARGV[b + 3] ~= '' then return nil end
    local n = ws_tonum(ARGV[b])
    b = b + 4
    for _ = 1, n do
      local kind = ARGV[b]
      if kind == WS_IT_LIMIT then
        b = b + 4
      elseif kind == WS_IT_COUNT or kind == WS_IT_QUIET or kind == WS_IT_IFOK then
        b = b + 3
      else
        return nil
      end
    end
  end
  -- One pass: a synced record moves in its head at once (ws_fback undoes
  -- it); a counter opened whole is written after the last item. A list of
  -- limits (P) is one group's items, four entries each.
  local o0, nu, nd, px = o, 0, 0, -3
  for q = 1, ng do
    local n = P ~= nil and #P / 4 or ws_tonum(ARGV[a])
    a = a + (P ~= nil and 1 or 4)
    out[o + 1], out[o + 2], o = 1, 0, o + 2
    for _ = 1, n do
      local kind, shape, limit, costs, cost, na
      if P ~= nil then
        px = px + 4
        kind, shape, limit, costs, cost, na = WS_IT_LIMIT, P[px], P[px + 1], P[px + 2], P[px + 3], a
      else
        kind, shape, limit, costs, na = ARGV[a], ARGV[a + 1], WS_BIG - 1, ARGV[a + 2], a + 3
        if kind == WS_IT_LIMIT then limit, costs, na = ws_tonum(costs), ARGV[a + 3], a + 4 end
        cost = ws_tonum(costs)
      end
      local L, Hd, r, nt, nv, C = ws_fcheck(H, shape, k, limit, costs, cost)
      if L == nil then return ws_fback(nu, nd, out, o0) end
      if C == nil then
        local A, u = Hd.a, ws_fu
        u[nu + 1], u[nu + 2], u[nu + 3] = Hd, r, nt - A[r + 3]
        A[r + 3], A[r + 5], Hd.dirty, nu = nt, nv, true, nu + 3
      else
        ws_fd[nd + 1], ws_fd[nd + 2], ws_fd[nd + 3], nd = L, k, C, nd + 3
      end
      if kind == WS_IT_LIMIT then
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], o = 4, nt, 0, L.reset, 0, o + 5
      else
        if kind == WS_IT_QUIET then nt = 0 end
        out[o + 1], out[o + 2], o = 1, nt, o + 2
      end
      a, k = na, k + WS_KPC
    end
  end
  for x = 1, nd, 3 do
    local L = ws_fd[x]
    ws_commit(L, ws_fd[x + 1], ws_fd[x + 2], L.target)
    ws_fd[x], ws_fd[x + 2] = false, false -- (nothing kept from one call to the next)
  end
  if ws_tracing ~= nil then ws_trace('fast') end
  return a, k
end
