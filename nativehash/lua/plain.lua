-- The plain hash's running total. Beside the buckets, the hash keeps t, the
-- sum of the buckets that start at or after m, and m, the start (Unix ms) of
-- the oldest bucket that was live at the last write. So a write or a sum
-- reads m, t and its bucket (one HMGET), not the whole counter:
--
--   fields of one counter, Window{10s, 1s}, at 12:00:15.3
--   m  1735732806000   (12:00:06: the oldest live bucket at the last write)
--   t  42              (the sum of the buckets from m on)
--   6 ... 15           the buckets (codes), 12:00:06 ... 12:00:15
--
--   Add at 12:00:17.1: the oldest live bucket is now 12:00:08, so buckets 6
--   and 7 have left: read them (HMGET), take them off t, and write
--   m = 12:00:08, t and bucket 17 in one HSET; then HDEL 6 and 7.
--
-- The HSET comes before the HDEL, so that a write refused half-way (OOM is
-- refused at the HSET) leaves m and t as they were. Every number is exact: t
-- moves by sweeps whose values' magnitudes add up to less than 2^53 (checked),
-- and by writes done exactly (see ws_plus). A counter idle for more than
-- WS_SWEEP buckets, whose total reaches 2^53, whose m is past the clock's
-- oldest live bucket (a clock that went back), or without m and t (a new
-- counter), is read whole once (HGETALL) and its total rebuilt.

-- WS_SWEEP is how many buckets a write may sweep one by one (see ws_dead).
local WS_SWEEP = 32

-- ws_codes appends to codes and starts the buckets that start in [from, to),
-- in time order, at most n of them (a year's last bucket may be short, so
-- the walk steps to the next year's start when it gets there). It answers
-- true when it got to `to`, false when it stopped at n, nil when from is not
-- a bucket start of the last, this or the next year; and the start where it
-- stopped.
local function ws_codes(L, from, to, n, codes, starts)
  local s, got = from, 0
  while s < to do
    if got == n then return false, s end
    local y, ny
    if s >= L.nxt then
      y, ny = L.nxt, math.huge
    elseif s >= L.cur then
      y, ny = L.cur, L.nxt
    elseif s >= L.prev then
      y, ny = L.prev, L.cur
    else
      return nil
    end
    local k = (s - y) / L.b
    if k % 1 ~= 0 then return nil end
    codes[#codes + 1], starts[#starts + 1], got = string.format('%d', k), s, got + 1
    s = math.min(s + L.b, ny)
  end
  return true, s
end

-- ws_dead lists the codes of the buckets that start in [from, to): those that
-- left the window between a write whose oldest live bucket started at from,
-- and now (to = L.low). It answers nil when there are more than WS_SWEEP, or
-- when from is not a bucket start of this year or the last.
local function ws_dead(L, from, to)
  local codes = {}
  if ws_codes(L, from, to, WS_SWEEP, codes, {}) then return codes end
  return nil
end

-- ws_rebuild is ws_open's answer from a full read: t and m are to be written
-- anew, and every stale field deleted, by ws_put.
local function ws_rebuild(L, key, B)
  local all = ws_read(key)
  local S = ws_scan(L, all, L.now - L.w, false)
  local sum, fits = ws_scansum(L, all, S, L.now - L.w)
  local C = {sum = sum, fits = fits, all = all, S = S, dead = S.stale, cur = false, synced = nil, nsum = nil, nv = nil}
  for i = 1, #all, 2 do
    if all[i] == B.field then C.cur = all[i + 1] end
  end
  return C
end

-- ws_open reads the counter's state for a write to bucket B, or for a sum: C.sum
-- is the window sum (C.fits: within int64); C.synced tells whether m is the clock's oldest live
-- bucket already; C.dead lists the fields ws_put is to delete; C.cur is B's
-- value as stored (false: no such field). It writes nothing. mt, when given,
-- is the HMGET of m, t and B's field already made (see ws_fastopen).
local function ws_open(L, key, B, mt)
  local low = L.low
  mt = mt or redis.call('HMGET', key, 'm', 't', B.field)
  local m, t = tonumber(mt[1]), tonumber(mt[2])
  if m == nil or t == nil or m > low or t >= WS_BIG or t <= -WS_BIG then
    return ws_rebuild(L, key, B)
  end
  -- (The fields set later are named too, as nil: the constructor sizes the
  -- table for them, so that it is not rehashed as it grows.)
  local C = {sum = t, fits = true, cur = mt[3] or false, synced = m == low, dead = nil, nsum = nil, nv = nil}
  if C.synced then return C end
  local dead = ws_dead(L, m, low)
  if dead == nil then return ws_rebuild(L, key, B) end
  local vals = redis.call('HMGET', key, unpack(dead))
  local gone, mag, del = 0, t < 0 and -t or t, {}
  for i = 1, #dead do
    if vals[i] then
      local v = tonumber(vals[i])
      if v == nil then return ws_rebuild(L, key, B) end
      gone, mag = gone + v, mag + (v < 0 and -v or v)
      del[#del + 1] = dead[i]
    end
  end
  if mag >= WS_BIG then return ws_rebuild(L, key, B) end
  C.sum, C.dead = t - gone, del
  return C
end

-- ws_prepare computes what adding delta (a decimal string) to bucket B does
-- to t and to the bucket, exactly, into C; it raises WS_E_OVERFLOW, having
-- written nothing, when the window sum or the bucket would leave int64.
-- ws_commit then writes it: one HSET (with m when it moves), then the HDEL
-- of the fields that left the window. A group prepares every write before it
-- commits one, so that no item's overflow leaves another written.
--
-- The common case, a total, a bucket and a delta all below 2^53 whose sums
-- stay there, is done on doubles inline (the hot path of Add and Allow); any
-- other goes through ws_addsum and ws_bucketplus, exactly.
local function ws_prepare(L, C, delta, B)
  local s, d, cur = C.sum, tonumber(delta), C.cur
  local v = 0
  if cur then v = tonumber(cur) end
  if type(s) == 'number' and v ~= nil and d ~= nil then
    local n, nv = s + d, v + d
    if n < WS_BIG and n > -WS_BIG and nv < WS_BIG and nv > -WS_BIG and d < WS_BIG and d > -WS_BIG and
        v < WS_BIG and v > -WS_BIG then
      C.nsum, C.nv = n, nv
      return
    end
  end
  C.nsum = ws_addsum(s, delta)
  -- A bucket that is not an integer raises WS_E_NOTCOUNTER (ws_split).
  C.nv = ws_bucketplus(cur or '0', delta)
end

local function ws_commit(L, key, C, B)
  local sum, nv = C.nsum, C.nv
  local ts, vs = ws_str(sum), ws_str(nv)
  if C.synced then
    redis.call('HSET', key, 't', ts, B.field, vs)
  else
    redis.call('HSET', key, 'm', string.format('%d', L.low), 't', ts, B.field, vs)
  end
  if C.dead ~= nil and #C.dead > 0 then ws_drop(key, C.dead) end
  if not C.cur then ws_touch(L, key, B) end
  if type(nv) == 'string' then nv = tonumber(nv) end
  return sum, nv
end

-- ws_put adds delta to bucket B: ws_prepare, then ws_commit. It returns the
-- new window sum and the bucket's new value.
local function ws_put(L, key, C, delta, B)
  ws_prepare(L, C, delta, B)
  return ws_commit(L, key, C, B)
end

-- A group's write that answers no sum (WS_IT_QUIET) is an ordinary one here:
-- the running total moves with it.
local function ws_quiet(L, key, delta, B)
  local C = ws_open(L, key, B)
  ws_prepare(L, C, delta, B)
  return C
end

local ws_quietcommit = ws_commit

-- ws_fastopen is the open of a write to the current bucket under a limit
-- (Add, Allow, a group of limits; see ops.lua): when the counter is synced,
-- the limit admits cost (> 0) and every number stays below 2^53,
-- it answers the new total and bucket (doubles, exact) and its read (mt),
-- and ws_fastcommit writes them as ws_commit would, without a table per
-- counter; otherwise it answers nil, nil, nil and ws_open's state, from the
-- same read. (ws_open(L, key, L.target, mt) is the state of a counter on
-- the fast path, for a refusal.)
local function ws_fastopen(L, key, limit, cost)
  local mt = redis.call('HMGET', key, 'm', 't', L.field)
  local t, cur = tonumber(mt[2]), mt[3]
  if t ~= nil and tonumber(mt[1]) == L.low and cost > 0 and cost <= limit and limit < WS_BIG and
      t > -WS_BIG and t <= limit - cost then
    local v = 0
    if cur then v = tonumber(cur) end
    if v ~= nil and v > -WS_BIG and v + cost < WS_BIG and v + cost ~= 0 then
      return t + cost, v + cost, mt
    end
  end
  return nil, nil, nil, ws_open(L, key, L.target, mt)
end

local function ws_fastcommit(L, key, nt, nv, mt)
  redis.call('HSET', key, 't', string.format('%d', nt), L.field, string.format('%d', nv))
  if not mt[3] then ws_touch(L, key, L.target) end
end

-- WS_PEEK is how many of a refused counter's oldest live buckets ws_peek
-- reads for the retry, and WS_PEEKUP how many from the current bucket on
-- (the current one and those ahead within the future tolerance) it may read
-- for the reset.
local WS_PEEK, WS_PEEKUP = 4, 8

-- ws_peek reads a few of a refused counter's buckets (see ops.lua): the
-- WS_PEEK oldest live ones, which leave first, and the newest: those from
-- the current bucket on, and, when the current bucket holds nothing, the
-- WS_PEEK before it. A key kept at its limit, as a hammered key is, is let
-- in again when its oldest buckets leave, and one of its newest buckets
-- holds its last admission: one HMGET of a few fields answers its retry and
-- reset, where the general path reads every field and sorts them. (Near a
-- year's end, whose last bucket may be short, the buckets before the
-- current one may not be found: the peek then gives up.) It answers nil when
-- C already read the counter whole, when the window sum is not a double
-- (past 2^53) or the magnitudes read could add up to 2^53, when more than
-- WS_PEEKUP buckets lie ahead, and, given the cost and limit of a refusal,
-- when what must leave for the cost to fit is more than twice what WS_PEEK
-- buckets of a window as full as this one hold on average (a limit far
-- below the sum): the few buckets would not settle it, and the read would be
-- wasted.
local function ws_peek(L, key, C, cost, limit)
  local sum = C.sum
  if C.all ~= nil or type(sum) ~= 'number' then return nil end
  if cost ~= nil and cost <= limit and (sum - (limit - cost)) * L.w > 2 * WS_PEEK * L.b * sum then return nil end
  local codes, starts = {}, {}
  local whole, s = ws_codes(L, L.low, L.cstart, WS_PEEK, codes, starts)
  if whole == nil then return nil end
  local nold = #codes
  if not whole and (not C.cur or tonumber(C.cur) == 0) then
    local from = L.cstart - WS_PEEK * L.b
    if from <= s then from, whole = s, true end
    if ws_codes(L, from, L.cstart, WS_PEEK, codes, starts) ~= true then return nil end
  end
  if not ws_codes(L, L.cstart, L.now + L.H.F + 1, WS_PEEKUP, codes, starts) then return nil end
  local raw = redis.call('HMGET', key, unpack(codes))
  local vals, mag = {}, sum < 0 and -sum or sum
  for i = 1, #codes do
    local v = 0
    if raw[i] then
      v = tonumber(raw[i])
      if v == nil then return nil end
    end
    vals[i], mag = v, mag + (v < 0 and -v or v)
  end
  if mag >= WS_BIG then return nil end
  return {starts = starts, vals = vals, raw = raw, nold = nold, whole = whole}
end

-- ws_peekreach bounds the moments up to which a peek (ws_peek) of a counter
-- of shape L sees every bucket that leaves: past it, a bucket it did not
-- read may leave. Unbounded when the oldest buckets it reads reach the
-- current one.
local function ws_peekreach(L)
  if L.cstart - L.low <= WS_PEEK * L.b then return math.huge end
  return L.low + (WS_PEEK - 1) * L.b + L.w - L.now
end

local function ws_detail(L, key, C)
  local all = (C ~= nil and C.all) or ws_read(key)
  return ws_scan(L, all, L.now - L.w, true)
end

local function ws_addnosum(L, key, delta, B)
  ws_put(L, key, ws_open(L, key, B), delta, B)
  return 1
end

local function ws_sumover(L, key, lb)
  if lb ~= L.w then return ws_scanread(L, key, lb) end
  local C = ws_open(L, key, L.target)
  return ws_checked(C.sum, C.fits)
end
