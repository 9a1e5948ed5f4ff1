-- The plain hash's fast path, the one path beside event.lua's pipeline: an
-- event of counts and limits without an event id or time (Add, Allow,
-- AllowAll on one key or several) whose every counter's record is synced on
-- the current bucket, or moves on by at most WS_SWEEP buckets, or starts
-- afresh, and whose every limit admits, with every number below 2^53. It
-- reads its operation from ARGV in place, each head once, and writes each
-- head once at the operation's end (a move also reads and writes its hash):
-- no table per item or counter, where the pipeline makes a few. Any other
-- operation, or one it gives up on (having written nothing), goes through
-- the pipeline, which answers and writes the same
-- (TestFastPathDifferential).

-- ws_fname is the field of this year's bucket with code k of window L, made
-- once per shape and header (a code reaches 31 million: a one-second bucket
-- in late December; the names are kept under -k, since gopher-lua, the
-- demo's server, fills an array with nils up to a positive key).
local function ws_fname(L, k)
  local f = L.fnames
  if not f then
    f = {}
    L.fnames = f
  end
  local n = f[-k]
  if n == nil then
    n = string.format('%d', k)
    f[-k] = n
  end
  return n
end

-- ws_msweep checks a move of a record (m, t, c, v) of window L, counter key:
-- a cost (> 0) under a limit, counted in the current bucket once the buckets
-- that left [m, low) are taken off t (one HMGET of them and of the current
-- bucket; the record's own bucket from the record). It answers the new total
-- and current bucket value, the fields to delete, and the field of the
-- record's bucket when it is still live (a flush), or nil, having written
-- nothing: more than WS_SWEEP buckets, a year's start, a clock behind the
-- record, a number that would reach 2^53.
local function ws_msweep(L, key, m, t, c, v, limit, cost)
  local b, y, low = L.b, L.cur, L.low
  if c > L.cstart or m > low or m < y or m < low - WS_SWEEP * b or t <= -WS_BIG or v <= -WS_BIG then return nil end
  local names, nd, mag, gone = {}, 0, t < 0 and -t or t, 0
  for s = m, low - b, b do
    if s == c then
      gone, mag = gone + v, mag + (v < 0 and -v or v)
    else
      nd = nd + 1
      names[nd] = ws_fname(L, (s - y) / b)
    end
  end
  names[nd + 1] = L.field
  local vals = redis.call('HMGET', KEYS[key], unpack(names, 1, nd + 1))
  local cur = 0
  if vals[nd + 1] then
    cur = tonumber(vals[nd + 1])
    if cur == nil then return nil end
  end
  local nx = 0 -- (the fields to delete, those that hold a bucket, kept in names)
  for j = 1, nd do
    local x = vals[j]
    if x then
      local val = tonumber(x)
      if val == nil then return nil end
      gone, mag, nx = gone + val, mag + (val < 0 and -val or val), nx + 1
      names[nx] = names[j]
    end
  end
  for j = nx + 1, nd + 1 do names[j] = nil end
  local nv = cur + cost
  if mag >= WS_BIG or t - gone > limit - cost or cur <= -WS_BIG or nv >= WS_BIG or nv == 0 then return nil end
  local flush = nil
  if c >= low then flush = ws_fname(L, (c - y) / b) end
  return t - gone + cost, nv, names, flush
end

-- ws_fcheck decides an item of the fast path: a cost (costs, a decimal
-- string) under a limit (a number) in the counter at KEYS[k] of window shape.
-- When the cost fits and every number stays below 2^53 it answers the window
-- L, the head Hd and its record i (nil: none), the new total and current
-- bucket value (nt, nv) and how to write them (mv: 0 the head alone; 1 a
-- move, with the fields to delete (del) and the record's bucket to flush; 2
-- a fresh start: the hash does not exist, and no bucket of the window holds
-- anything); else nil. Reads only.
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
    local m, t, c, v = a[i + 2], a[i + 3], a[i + 4], a[i + 5]
    if c == L.cstart and m == L.low then
      if t > limit - cost or t <= -WS_BIG or v <= -WS_BIG or v + cost >= WS_BIG or v + cost == 0 then return nil end
      return L, Hd, i, t + cost, v + cost, 0
    end
    if c + L.w > L.now then
      local nt, nv, del, flush = ws_msweep(L, k, m, t, c, v, limit, cost)
      if nt == nil then return nil end
      return L, Hd, i, nt, nv, 1, del, flush
    end
  end
  if redis.call('EXISTS', KEYS[k]) ~= 0 then return nil end
  return L, Hd, i, cost, cost, 2
end

-- ws_fwrite writes what ws_fcheck decided for the counter at KEYS[k] (the
-- head at the operation's end, ws_end).
local function ws_fwrite(L, k, Hd, i, nt, nv, mv, del, flush)
  if mv == 0 then
    local a = Hd.a
    a[i + 3], a[i + 5], Hd.dirty = nt, nv, true
    return
  end
  if mv == 1 then
    local hk = KEYS[k]
    if flush then redis.call('HSET', hk, flush, string.format('%d', Hd.a[i + 5])) end
    redis.call('PEXPIREAT', hk, ws_expiry(L.H, L.cstart + L.w))
    if #del > 0 then redis.call('HDEL', hk, unpack(del)) end
  end
  ws_hset(Hd, L, i, L.low, nt, L.cstart, nv)
end

-- ws_fe holds the items of a group or a link on the fast path, between their
-- checks and their writes: one table per item, reused from one call to the
-- next, with what ws_fcheck answered.
local ws_fe = {}

-- ws_fentry checks an item into ws_fe[x]; it reports whether the fast path
-- takes it.
local function ws_fentry(H, x, kind, shape, k, limit, costs)
  local L, Hd, i, nt, nv, mv, del, flush = ws_fcheck(H, shape, k, limit, costs)
  if L == nil then return false end
  local e = ws_fe[x]
  if e == nil then
    e = {L = false, k = 0, kind = false, hd = false, rec = false, nt = 0, nv = 0, mv = 0, del = false, flush = false}
    ws_fe[x] = e
  end
  e.L, e.k, e.kind, e.hd, e.rec, e.nt, e.nv, e.mv, e.del, e.flush = L, k, kind, Hd, i, nt, nv, mv, del, flush
  return true
end

-- ws_fgroups checks the groups of a link (ng of them) or of one group at
-- ARGV[a], KEYS[k]: the number of entries, and where the next operation
-- starts in each; nil when one is not the fast path's.
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

-- ws_fast runs the operation at ARGV[i], KEYS[k] on the fast path, if it
-- takes it: it appends the operation's values to out (see write.lua) and
-- answers where the next operation starts in each; nil, having written
-- nothing, when it does not (the heads it read stay for the pipeline,
-- ws_hget).
local function ws_fast(H, i, k, out)
  if ws_tracing ~= nil and ws_tracing.general then return nil end
  local op, o = ARGV[i], #out
  if op == WS_OP_ADD or op == WS_OP_ADDNOSUM or op == WS_OP_ALLOW then
    local limit, costs, ni = WS_BIG - 1, ARGV[i + 2], i + 3
    if op == WS_OP_ALLOW then limit, costs, ni = ws_tonum(ARGV[i + 2]), ARGV[i + 3], i + 4 end
    local L, Hd, j, nt, nv, mv, del, flush = ws_fcheck(H, ARGV[i + 1], k, limit, costs)
    if L == nil then return nil end
    ws_fwrite(L, k, Hd, j, nt, nv, mv, del, flush)
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
      ws_fwrite(L, e.k, e.hd, e.rec, nt, e.nv, e.mv, e.del, e.flush)
      e.L, e.hd, e.del = false, false, false -- (nothing kept from one call to the next)
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
