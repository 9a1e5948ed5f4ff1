-- The plain hash's fast path, the one path beside event.lua's pipeline: an
-- event of counts and limits without an event id or time (Add, Allow,
-- AllowAll on one key or several) whose every limit admits. It reads its
-- operation from ARGV in place, each head once, and a counter synced on the
-- current bucket in its head alone (others through plain.lua's operations),
-- and writes each head once at the end: no table per item. Any other, or one
-- it gives up on (having written nothing), takes the pipeline, which answers
-- and writes the same (TestFastPathDifferential).

-- ws_fcheck decides an item of the fast path: a cost (costs, a decimal
-- string) under a limit (a number) in the counter at KEYS[k] of window shape.
-- When the cost fits it answers the window L, the head Hd and its record i,
-- and the new total and current bucket value (nt, nv) for a record synced
-- on the current bucket (the head alone), or, for any other, the counter's
-- state C from ws_open, prepared (ws_commit writes it); else nil. Reads only.
local function ws_fcheck(H, shape, k, limit, costs)
  local cost = ws_tonum(costs)
  if cost == nil or cost <= 0 or cost > limit or limit >= WS_BIG then return nil end
  local L = ws_shape(H, shape)
  local Hd = ws_hget(L, k)
  local i = ws_hfind(Hd, L)
  if i ~= nil then
    -- (No ws_hcheck: a record taken here has m and c equal to the clock's
    -- buckets and t and v within bounds, which a head that is not a
    -- counter's could only pass with fractions.)
    local a = Hd.a
    local t, v = a[i + 3], a[i + 5]
    if a[i + 4] == L.cstart and a[i + 2] == L.low and t > -WS_BIG and v > -WS_BIG and v + cost < WS_BIG and v + cost ~= 0 then
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

-- ws_fwrite writes what ws_fcheck decided for the counter at KEYS[k].
local function ws_fwrite(L, k, Hd, i, nt, nv, C)
  if C ~= nil then
    ws_commit(L, k, C, L.target)
    return
  end
  local a = Hd.a
  a[i + 3], a[i + 5], Hd.dirty = nt, nv, true
end

-- ws_fe holds what ws_fcheck answered for each item of a group or link, in
-- tables reused from call to call.
local ws_fe = {}

-- ws_fentry checks an item into ws_fe[x]: whether the fast path takes it.
local function ws_fentry(H, x, kind, shape, k, limit, costs)
  local L, Hd, i, nt, nv, C = ws_fcheck(H, shape, k, limit, costs)
  if L == nil then return false end
  local e = ws_fe[x]
  if e == nil then
    e = {L = false, k = 0, kind = false, hd = false, rec = false, nt = 0, nv = 0, C = false}
    ws_fe[x] = e
  end
  e.L, e.k, e.kind, e.hd, e.rec, e.nt, e.nv, e.C = L, k, kind, Hd, i, nt, nv, C or false
  return true
end

-- ws_fgroups checks the ng groups at ARGV[a], KEYS[k]: the number of items and
-- where the next operation starts; nil when one is not the fast path's.
local function ws_fgroups(H, ng, a, k)
  local x = 0
  for q = 1, ng do
    if ARGV[a + 1] ~= '' or ARGV[a + 3] ~= '' then return nil end
    local n = ws_tonum(ARGV[a])
    a = a + 4
    for j = 1, n do
      local kind, ok = ARGV[a], false
      x = x + 1
      if kind == WS_IT_LIMIT then
        ok, a = ws_fentry(H, x, kind, ARGV[a + 1], k, ws_tonum(ARGV[a + 2]), ARGV[a + 3]), a + 4
      elseif kind == WS_IT_COUNT or kind == WS_IT_QUIET or kind == WS_IT_IFOK then
        ok, a = ws_fentry(H, x, kind, ARGV[a + 1], k, WS_BIG - 1, ARGV[a + 2]), a + 3
      end
      if not ok then return nil end
      k = k + WS_KPC
    end
  end
  return x, a, k
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
    local L, Hd, j, nt, nv, C = ws_fcheck(H, ARGV[i + 1], k, limit, costs)
    if L == nil then return nil end
    ws_fwrite(L, k, Hd, j, nt, nv, C)
    if ws_tracing ~= nil then ws_trace('fast') end
    if op == WS_OP_ADD then
      out[o + 1] = nt
    elseif op == WS_OP_ADDNOSUM then
      out[o + 1] = 1
    else
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, nt, 0, L.target.start + L.w - L.now
    end
    return ni, k + WS_KPC
  end
  if op ~= WS_OP_GROUP and op ~= WS_OP_LINK then return nil end
  local ng, a = 1, i + 1
  if op == WS_OP_LINK then ng, a = ws_tonum(ARGV[i + 1]), i + 2 end
  local n, ni, nk = ws_fgroups(H, ng, a, k)
  if n == nil then return nil end
  local x = 0
  for q = 1, ng do
    local m = ws_tonum(ARGV[a])
    a = a + 4
    out[o + 1], out[o + 2], o = 1, 0, o + 2
    for j = 1, m do
      x = x + 1
      local e = ws_fe[x]
      local L, nt = e.L, e.nt
      ws_fwrite(L, e.k, e.hd, e.rec, nt, e.nv, e.C or nil)
      e.L, e.hd, e.C = false, false, false -- (nothing kept from one call to the next)
      if e.kind == WS_IT_LIMIT then
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 4, nt, 0, L.target.start + L.w - L.now, 0
        a, o = a + 4, o + 5
      else
        if e.kind == WS_IT_QUIET then nt = 0 end
        out[o + 1], out[o + 2] = 1, nt
        a, o = a + 3, o + 2
      end
    end
  end
  if ws_tracing ~= nil then ws_trace('fast') end
  return ni, nk
end
