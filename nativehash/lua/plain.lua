-- The plain hash's counter operations, on its running totals (see
-- plainprims.lua). An event counted in the current bucket of a synced record
-- (m the oldest live bucket, c the current one) moves t and v in the head
-- alone. When the window has moved on, the buckets that left [m, low) are
-- read (HMGET) and taken off t, bucket c's value goes to its field (a
-- flush), the record moves to the current bucket, and the buckets that left
-- are deleted. A counter without a record, idle past WS_SWEEP buckets or its
-- window, beyond 2^53, or whose record is past the clock, is read whole
-- (HGETALL) and its record made anew. The hash expires when the record's
-- bucket leaves the window, so a bucket the total counts has its field to
-- sweep. The head is written last (ws_end): OOM can refuse only a first write.

-- WS_SWEEP is how many buckets a read may sweep one by one (see ws_recsum).
local WS_SWEEP = 32

-- ws_codes appends to codes and starts the buckets that start in [from, to),
-- in time order, at most n (a year's short last bucket steps to the next
-- year's start). It answers true when it got to `to`, false when it stopped
-- at n, nil when from is not a bucket start of the three years around now.
local function ws_codes(L, from, to, n, codes, starts)
  local s, got = from, 0
  while s < to do
    if got == n then return false, s end
    local f = ws_code(L, s)
    if f == nil then return nil end
    codes[#codes + 1], starts[#starts + 1], got = f, s, got + 1
    s = math.min(s + L.b, s >= L.nxt and math.huge or (s >= L.cur and L.nxt or L.cur))
  end
  return true, s
end

-- ws_rebuild is ws_open's answer from a full read: ws_commit writes the
-- record anew and deletes every stale field.
local function ws_rebuild(L, key, B, Hd, i)
  local all = ws_read(key, L)
  local S = ws_scan(L, all, L.now - L.w, false)
  local sum, fits = ws_scansum(L, all, S, L.now - L.w)
  local C = {sum = sum, fits = fits, all = all, S = S, dead = S.stale, cur = false, nsum = nil, nv = nil, hd = Hd, i = i}
  for j = 1, #all, 2 do
    if all[j] == B.field then C.cur = all[j + 1] end
  end
  return C
end

-- ws_recsum is the window sum of the counter whose hash is KEYS[key], from its
-- head's record (m, t, c, v: past ws_recok), less the buckets that left the
-- window since (one HMGET, which reads bucket B's field too when B is given
-- and not the record's): sum, B's value (false: none), and with keep the dead
-- fields to delete. Reads only, and raises nothing. sum is nil for a counter
-- to read whole: idle past WS_SWEEP buckets or its window, beyond 2^53, a
-- field not an integer, a hash of another type.
local function ws_recsum(L, key, m, t, c, v, B, keep)
  local low = L.low
  if m > low or c > L.cstart or c + L.w <= L.now then return nil end
  local own = B == nil or B.start == c
  if m == low and own then return t, v, nil end
  local names, starts = nil, nil
  if m < low then
    local DD = L.dead
    if not DD then DD = {}; L.dead = DD end
    local D = DD[m]
    if D == nil then -- (L keeps them for every counter last written at m)
      D = {codes = {}, starts = {}}
      if not ws_codes(L, m, low, WS_SWEEP, D.codes, D.starts) then D = false end
      DD[m] = D
    end
    if not D then return nil end
    names, starts = D.codes, D.starts
  end
  local nd, o = names and #names or 0, own and 0 or 1 -- (own: m < low, some names)
  local vals = own and redis.pcall('HMGET', KEYS[key], unpack(names)) or
    redis.pcall('HMGET', KEYS[key], B.field, unpack(names or {}))
  if vals.err then return nil end -- (a hash of another type: the whole read raises its error)
  local gone, mag, del = 0, t < 0 and -t or t, keep and {} or nil
  for j = 1, nd do
    local x, val = vals[j + o], 0
    if x then
      val = tonumber(x)
      if val == nil then return nil end
      if keep then del[#del + 1] = names[j] end
    end
    if starts[j] == c then val = v end
    gone, mag = gone + val, mag + (val < 0 and -val or val)
  end
  if mag >= WS_BIG then return nil end
  if not own then
    v = vals[1] or false
    if v and tonumber(v) == nil then return nil end
  end
  return t - gone, v, del
end

-- ws_headsum is ws_recsum of counter key's record in its head (pre: the head,
-- if read already), with the head and the record: sum, B's value, the dead
-- fields, Hd, i.
local function ws_headsum(L, key, B, pre)
  local Hd = ws_hget(L, key, pre)
  local i = ws_hfind(Hd, L)
  if i == nil then return nil, nil, nil, Hd, nil end
  ws_hcheck(Hd, i)
  local a = Hd.a
  local sum, v, del = ws_recsum(L, key, a[i + 2], a[i + 3], a[i + 4], a[i + 5], B, B ~= nil)
  return sum, v, del, Hd, i
end

-- ws_open reads the counter for a write to bucket B: C.sum (C.fits: within
-- int64), C.cur (B's value; false: none), C.dead (the fields to delete),
-- C.hd and C.i (the head and the record). Reads only.
local function ws_open(L, key, B)
  local sum, cur, dead, Hd, i = ws_headsum(L, key, B)
  if sum == nil then return ws_rebuild(L, key, B, Hd, i) end
  return {sum = sum, fits = true, cur = cur, dead = dead, nsum = nil, nv = nil, hd = Hd, i = i, all = nil}
end

-- ws_prepare computes what adding delta (a decimal string) to bucket B does
-- to the window sum and the bucket, exactly, into C, and raises
-- WS_E.OVERFLOW, having written nothing, when either would leave int64: on
-- doubles while every number stays below 2^53, else on pairs.
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
  -- A bucket that is not an integer raises WS_E.NOTCOUNTER (ws_split).
  C.nv = ws_bucketplus(cur and ws_str(cur) or '0', delta)
end

-- ws_commit writes what ws_prepare prepared to bucket B, and answers the new
-- window sum and the bucket's value. A write to the current bucket moves the
-- record there (flushing its old bucket to its field); one to an earlier
-- bucket (late, or an undo) goes to that bucket's field, unless it is the
-- record's. After a full read the record is made anew; beyond 2^53 the
-- counter keeps no record.
local function ws_commit(L, key, C, B)
  local sum, nv = C.nsum, C.nv
  local Hd, i, cst = C.hd, C.i, L.cstart
  local a = Hd.a
  local oc, ov = nil, nil -- the record's bucket and value before the write
  if i ~= nil then oc, ov = a[i + 4], a[i + 5] end
  local nc, nvv -- the record's bucket and value after it
  if B.start == cst then
    nc, nvv = cst, nv
  elseif C.all == nil then
    -- (opened from a synced or swept record, on a bucket at or before cst)
    nc, nvv = oc, ov
    if B.start == oc then nvv = nv end
  else
    nc, nvv = cst, 0
    local f = L.field
    for j = 1, #C.all, 2 do
      if C.all[j] == f then
        local x = C.all[j + 1]
        nvv = tonumber(x)
        if not (nvv and nvv < WS_BIG and nvv > -WS_BIG) then nvv = x end -- (beyond 2^53: the decimal string)
      end
    end
  end
  -- (A record holds integers below 2^53; a sum or bucket beyond is a decimal string.)
  local keep = type(sum) == 'number' and sum < WS_BIG and sum > -WS_BIG and type(nvv) == 'number' and nvv < WS_BIG and
    nvv > -WS_BIG
  local f1, v1, f2, v2 = nil, nil, nil, nil -- the fields to set
  if B.start ~= nc or not keep then f1, v1 = B.field, ws_str(nv) end
  -- The record's old bucket, when the record leaves it and it is still
  -- live (or ahead of a clock that went back), goes to its field.
  if oc ~= nil and (oc ~= nc or not keep) and oc ~= B.start and oc + L.w > L.now then
    f2 = ws_code(L, oc)
    if f2 ~= nil then v2 = string.format('%d', ov) end
  end
  if f1 == nil then f1, v1, f2 = f2, v2, nil end
  if f2 ~= nil then
    redis.call('HSET', KEYS[key], f1, v1, f2, v2)
  elseif f1 ~= nil then
    redis.call('HSET', KEYS[key], f1, v1)
  end
  if f1 ~= nil or (nc ~= oc and not (C.all ~= nil and #C.all == 0)) then
    -- The hash lives while the record's bucket (or a later one) is live; a
    -- write to an earlier bucket may only extend it. (A full read that
    -- found no field: there is no hash.)
    local at = nc
    if B.start > at then at = B.start end
    if oc ~= nil and oc > at then at = oc end
    ws_hexpire(L, KEYS[key], at + L.w, B.start ~= cst)
  end
  if C.dead ~= nil and #C.dead > 0 then ws_drop(KEYS[key], C.dead) end
  ws_hset(Hd, L, i, keep and L.low or nil, sum, nc, nvv) -- (no record past 2^53)
  if type(nv) == 'string' then nv = tonumber(nv) end
  return sum, nv
end

-- A group's write that answers no sum (WS_IT_QUIET) is an ordinary one here:
-- the running total moves with it.
local function ws_quiet(L, key, delta, B)
  local C = ws_open(L, key, B)
  ws_prepare(L, C, delta, B)
  return C
end

local ws_quietcommit = ws_commit

local function ws_detail(L, key, C)
  local all = (C ~= nil and C.all) or ws_read(key, L)
  return ws_scan(L, all, L.now - L.w, true)
end

-- ws_sumover is the read-only sum of counter key over lookback lb: the window's from its
-- head (ws_headsum; pre, its head if read already), else read whole as ws_open would
-- (under a trace of the general path alone, as a write opens it); a shorter lookback's
-- from a full read.
local function ws_sumover(L, key, lb, pre)
  if lb ~= L.w then return ws_scanread(L, key, lb) end
  local general, sum, _, Hd, i = ws_tracing and ws_tracing.general, nil, nil, nil, nil
  if not general then sum, _, _, Hd, i = ws_headsum(L, key, nil, pre) end
  ws_trace(sum ~= nil and 'sumhead' or 'sumopen')
  if sum ~= nil then return sum end
  local C = general and ws_open(L, key, L.target) or ws_rebuild(L, key, L.target, Hd, i)
  return ws_checked(C.sum, C.fits)
end

-- ws_sumrun answers out[j .. j + n - 1], the window sums of the n counters from
-- KEYS index k (a run in a Sum call), their heads in one MGET, each record as
-- ws_headsum takes it, else (no record, or ws_recsum cannot answer) ws_sumover.
local function ws_sumrun(L, k, n, out, j)
  local hk = {}
  for x = 1, n do hk[x] = KEYS[k + WS_KPC * x - 1] end
  local heads = redis.call('MGET', unpack(hk, 1, n))
  local b, w, f, len, run = L.b, L.w, ws_fmts[1] or ws_fmt(1), 8 * WS_REC, 0
  for x = 1, n do
    local s, key, sum = heads[x], k + WS_KPC * (x - 1), nil
    if s and #s % len == 0 then
      for p = 1, #s - len + 1, len do
        local rb, rw, m, t, c, v = ws_unpack(f, s, p)
        if rb == b and rw == w then
          if ws_recok(m, t, c, v) then sum = ws_recsum(L, key, m, t, c, v) end
          break
        end
      end
    end
    if sum ~= nil then
      out[j + x - 1], run = sum, run + 1
    else
      out[j + x - 1] = ws_result(pcall(ws_sumover, L, key, w, s))
    end
  end
  ws_trace('sumrun', run)
end
