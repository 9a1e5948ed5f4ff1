-- The plain hash's fast path, the one path beside event.lua's pipeline: an
-- event of counts and limits without an event id or time (Add, Allow,
-- AllowAll on one key or several) whose every counter's record is synced on
-- the current bucket, or moves on by at most WS_SWEEP buckets, or starts
-- afresh, and whose every limit admits, with every number below 2^53. It
-- reads each head once and writes it once at the operation's end (a move
-- also reads and writes its hash), and makes no table per counter: what the
-- pipeline would make of these events, at about half the server's
-- instructions. Any other event, or one it gives up on, goes through the
-- pipeline, which answers and writes the same (TestFastPathDifferential).

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

-- ws_fdecide is the fast path's check of item it's counter (record i of
-- head Hd, nil: none) for a cost (> 0) under a limit: when the cost fits and
-- every number stays below 2^53, it keeps in the item the new total and
-- current bucket value and how to write them (it.mv: 0 the head alone; 1 a
-- move, with it.del and it.flush; 2 a fresh start: no bucket of the window
-- holds anything, the hash does not exist), and answers true, having written
-- nothing.
local function ws_fdecide(L, it, Hd, i, limit, cost)
  local key = it.key
  if i ~= nil then
    local a = Hd.a
    local m, t, c, v = a[i + 2], a[i + 3], a[i + 4], a[i + 5]
    if c == L.cstart and m == L.low then
      if t > limit - cost or t <= -WS_BIG or v <= -WS_BIG or v + cost >= WS_BIG or v + cost == 0 then return false end
      it.nt, it.nv, it.mv = t + cost, v + cost, 0
      return true
    end
    if c + L.w > L.now then
      local nt, nv, del, flush = ws_msweep(L, key, m, t, c, v, limit, cost)
      if nt == nil then return false end
      it.nt, it.nv, it.mv, it.del, it.flush = nt, nv, 1, del, flush
      return true
    end
  end
  if redis.call('EXISTS', KEYS[key]) ~= 0 then return false end
  it.nt, it.nv, it.mv = cost, cost, 2
  return true
end

-- ws_fast runs the groups Gs of one event on the fast path, and answers
-- their answers, or nil, having written nothing (the heads it read stay for
-- the pipeline, ws_hget).
local function ws_fast(Gs)
  if ws_tracing and ws_tracing.general then return nil end
  for q = 1, #Gs do
    local G = Gs[q]
    if G.idkey ~= nil or G.e ~= nil then return nil end
    local items = G.items
    for j = 1, #items do
      local it = items[j]
      local kind, limit, cost = it.kind, it.limit, it.cost
      if kind ~= WS_IT_LIMIT then
        if kind ~= WS_IT_COUNT and kind ~= WS_IT_QUIET and kind ~= WS_IT_IFOK then return nil end
        limit, cost = WS_BIG - 1, ws_tonum(it.delta)
      end
      if cost == nil or cost <= 0 or cost > limit or limit >= WS_BIG then return nil end
      local L = it.L
      local Hd = ws_hget(L, it.key)
      local i = ws_hfind(Hd, L)
      if i ~= nil then ws_hcheck(Hd, i) end
      if not ws_fdecide(L, it, Hd, i, limit, cost) then return nil end
      it.hd, it.rec = Hd, i
    end
  end
  -- Every limit admits: count.
  local outs = {}
  for q = 1, #Gs do
    local items, out = Gs[q].items, {1, 0}
    for j = 1, #items do
      local it = items[j]
      local L, Hd, i, mv = it.L, it.hd, it.rec, it.mv
      if mv == 0 then
        local a = Hd.a
        a[i + 3], a[i + 5], Hd.dirty = it.nt, it.nv, true
      else
        if mv == 1 then
          local hk = KEYS[it.key]
          if it.flush ~= nil then redis.call('HSET', hk, it.flush, string.format('%d', Hd.a[i + 5])) end
          redis.call('PEXPIREAT', hk, ws_expiry(L.H, L.cstart + L.w))
          if #it.del > 0 then redis.call('HDEL', hk, unpack(it.del)) end
        end
        ws_hset(Hd, L, i, L.low, it.nt, L.cstart, it.nv)
      end
      if it.kind == WS_IT_LIMIT then
        out[j + 2] = {it.nt, 0, L.target.start + L.w - L.now, 0}
      elseif it.kind == WS_IT_QUIET then
        out[j + 2] = 0
      else
        out[j + 2] = it.nt
      end
    end
    outs[q] = out
  end
  ws_trace('fast')
  return outs
end
