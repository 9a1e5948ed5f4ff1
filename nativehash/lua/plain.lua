-- The plain hash's operations, on its running totals (see plainprims.lua for
-- the keys and the head's records). A record (m, t, c, v) of a window: t is
-- the sum of the buckets that start at or after m; bucket c's value is v.
--
--   Window{10s, 1s}, at 12:00:15.3, the record synced at the last write:
--   m  12:00:06   (the oldest live bucket at the last write)
--   t  42         (the buckets from 12:00:06 on)
--   c  12:00:15   v 3   (the current bucket: counted in the head alone)
--   hash: 6 ... 14, the buckets before c (codes), 12:00:06 ... 12:00:14
--
--   Add 1 at 12:00:15.8: the record is synced (m is the oldest live bucket,
--   c the current one): t = 43, v = 4, in the head (GET, SET).
--   Add 1 at 12:00:17.1: the oldest live bucket is now 12:00:08, so buckets
--   6 and 7 have left: read them (HMGET), take them off t; the current bucket
--   is 17: bucket 15's value goes to its field (HSET 15 4, a flush), and the
--   record becomes m = 12:00:08, t = 43 - b6 - b7 + 1, c = 12:00:17, v = 1;
--   then HDEL 6 and 7, and the hash's and the head's expiries move.
--
-- The head is written at the operation's end (ws_end), after the hash. The
-- first write of an operation is the only one the server can refuse (OOM),
-- and whichever it is, a refusal leaves every count as it was. Every number
-- is exact: a record holds integers below 2^53, t moves by sweeps whose
-- values' magnitudes add up to less than 2^53 (checked), and by writes done
-- exactly (see ws_plus). A counter without a record (new, or its total
-- beyond 2^53), idle for more than WS_SWEEP buckets or past its window, or
-- whose record is past the clock (a clock that went back), is read whole
-- (HGETALL, the record's bucket in place of its field) and its total rebuilt.
--
-- The buckets' hash expires when the record's current bucket leaves the
-- window: every flush, and every bucket the record moves to, sets it (a late
-- bucket only extends it). So while a record's total counts a bucket, that
-- bucket's field is there to be swept.

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

-- ws_dead lists the codes and starts of the buckets that start in [from, to):
-- those that left the window between a write whose oldest live bucket
-- started at from, and now (to = L.low). It answers nil when there are more
-- than WS_SWEEP, or when from is not a bucket start of this year or the last.
local function ws_dead(L, from, to)
  local codes, starts = {}, {}
  if ws_codes(L, from, to, WS_SWEEP, codes, starts) then return codes, starts end
  return nil
end

-- ws_rebuild is ws_open's answer from a full read (the record's bucket in
-- place of its field): the total and the record are to be written anew, and
-- every stale field deleted, by ws_commit.
local function ws_rebuild(L, key, B, Hd, i)
  local all = ws_read(key, L)
  local S = ws_scan(L, all, L.now - L.w, false)
  local sum, fits = ws_scansum(L, all, S, L.now - L.w)
  local C = {sum = sum, fits = fits, all = all, S = S, dead = S.stale, cur = false, synced = nil, nsum = nil, nv = nil,
    hd = Hd, i = i}
  for j = 1, #all, 2 do
    if all[j] == B.field then C.cur = all[j + 1] end
  end
  return C
end

-- ws_open reads the counter's state for a write to bucket B, or for a sum:
-- C.sum is the window sum (C.fits: within int64); C.cur is B's value (a
-- number from the record, a string from the hash, false: none); C.dead lists
-- the fields ws_commit is to delete; C.hd and C.i are the head and the
-- record (nil: none). It writes nothing. i, when given, is the record's
-- index as ws_fastopen found it.
local function ws_open(L, key, B, i)
  local Hd = ws_hget(L, key)
  if i ~= nil and i <= 0 then
    -- (a move or a fresh start ws_fastopen checked: this open is a refusal's,
    -- which writes nothing)
    if i < 0 then i = -i else i = nil end
    Hd.mvk, Hd.mvdel, Hd.mvflush = nil, nil, nil
  end
  if i == nil then i = ws_hfind(Hd, L) end
  if i == nil then return ws_rebuild(L, key, B, Hd, nil) end
  ws_hcheck(Hd, i)
  local a, low = Hd.a, L.low
  local m, t, c, v = a[i + 2], a[i + 3], a[i + 4], a[i + 5]
  if m > low or c > L.cstart or c + L.w <= L.now then return ws_rebuild(L, key, B, Hd, i) end
  -- (The fields set later are named too, as nil: the constructor sizes the
  -- table for them, so that it is not rehashed as it grows.)
  local C = {sum = t, fits = true, cur = v, synced = m == low, dead = nil, nsum = nil, nv = nil, hd = Hd, i = i,
    all = nil}
  local own = B.start == c
  if C.synced and own then return C end
  local names, dead, starts, nd = {}, nil, nil, 0
  if not C.synced then
    dead, starts = ws_dead(L, m, low)
    if dead == nil then return ws_rebuild(L, key, B, Hd, i) end
    nd = #dead
    for j = 1, nd do names[j] = dead[j] end
  end
  if not own then names[nd + 1] = B.field end
  local vals = redis.call('HMGET', KEYS[key], unpack(names))
  local gone, mag, del = 0, t < 0 and -t or t, {}
  for j = 1, nd do
    local x, val = vals[j], 0
    if x then
      val = tonumber(x)
      if val == nil then return ws_rebuild(L, key, B, Hd, i) end
      del[#del + 1] = dead[j]
    end
    if starts[j] == c then val = v end
    gone, mag = gone + val, mag + (val < 0 and -val or val)
  end
  if mag >= WS_BIG then return ws_rebuild(L, key, B, Hd, i) end
  if not own then
    local x = vals[nd + 1]
    if x and tonumber(x) == nil then return ws_rebuild(L, key, B, Hd, i) end
    C.cur = x or false
  end
  C.sum, C.dead = t - gone, del
  return C
end

-- ws_prepare computes what adding delta (a decimal string) to bucket B does
-- to the window sum and to the bucket, exactly, into C; it raises
-- WS_E_OVERFLOW, having written nothing, when either would leave int64.
-- ws_commit then writes it. A group prepares every write before it commits
-- one, so that no item's overflow leaves another written.
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
  C.nv = ws_bucketplus(cur and ws_str(cur) or '0', delta)
end

-- ws_exact reports whether x (a sum or a bucket as ws_num leaves it) is an
-- integer a record can hold.
local function ws_exact(x) return type(x) == 'number' and x < WS_BIG and x > -WS_BIG end

-- ws_fname is the field of this year's bucket with code k of window L, as a
-- string made once per shape and header, and ws_expat the server's Unix ms
-- of instant at (script clock), as a string, made once per shape and header
-- for the current bucket's leaving (L.cstart + L.w), the expiry of a head
-- or hash after a move. A move's arguments are passed to redis.call as
-- strings: a number argument is written there with snprintf's %.17g, which
-- on Redis 7.0 cost a move about a fifth of its instructions (callgrind),
-- and the calls of one header share each string. The names are kept under
-- -k, never k: a code reaches 31 million (a one-second bucket in late
-- December), and gopher-lua (miniredis: the demo's server) stores a table's
-- positive integer keys below 2^26 in an array it fills with nils up to the
-- key: for one name, an array of half a gigabyte, 2.4 GB allocated as it
-- grows, and seconds (TestKeysDeclared checks what a script allocates).
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

local function ws_expat(L, at)
  local H = L.H
  if H.srv == nil then H.srv = ws_srvnow() end
  if at ~= L.cstart + L.w then return string.format('%d', H.srv + (at - H.now)) end
  -- (A client-clock header's server time is read anew by each call: see ws_memo.)
  if L.xsrv ~= H.srv then L.xs, L.xsrv = string.format('%d', H.srv + (at - H.now)), H.srv end
  return L.xs
end

-- ws_hexpire makes hash hk expire at instant at (script clock), or, with
-- only, no sooner than it already does.
local function ws_hexpire(L, hk, at, only)
  local e = ws_expiry(L.H, at)
  if only then
    local pttl = redis.call('PTTL', hk)
    if pttl >= 0 and ws_expiry(L.H, L.now) + pttl >= e then return end
  end
  redis.call('PEXPIREAT', hk, e)
end

-- ws_commit writes what ws_prepare prepared (C.nsum, C.nv) to bucket B, and
-- answers the new window sum and the bucket's new value. A write to the
-- current bucket moves the record there (the bucket it had goes to its
-- field, a flush, while it is live); a write to an earlier bucket (a late
-- event, a reservation taken back) goes to that bucket's field, unless it is
-- the record's own. After a full read (C.all) the record is made anew on the
-- current bucket, as read. A total or a bucket beyond 2^53 leaves the counter
-- without a record: every bucket in its field.
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
        if not ws_exact(nvv) then nvv = x end
      end
    end
  end
  local keep = ws_exact(sum) and ws_exact(nvv)
  local set, ns = {}, 0
  if B.start ~= nc or not keep then set[1], set[2], ns = B.field, ws_str(nv), 2 end
  -- The record's old bucket, when the record leaves it and it is still
  -- live (or ahead of a clock that went back), goes to its field.
  if oc ~= nil and (oc ~= nc or not keep) and oc ~= B.start and oc + L.w > L.now then
    local f = ws_code(L, oc)
    if f ~= nil then set[ns + 1], set[ns + 2], ns = f, string.format('%d', ov), ns + 2 end
  end
  if ns > 0 then redis.call('HSET', KEYS[key], unpack(set)) end
  if ns > 0 or (nc ~= oc and not (C.all ~= nil and #C.all == 0)) then
    -- The hash lives while the record's bucket (or a later one) is live; a
    -- write to an earlier bucket may only extend it. (A full read that
    -- found no field: there is no hash.)
    local at = nc
    if B.start > at then at = B.start end
    if oc ~= nil and oc > at then at = oc end
    ws_hexpire(L, KEYS[key], at + L.w, B.start ~= cst)
  end
  if C.dead ~= nil and #C.dead > 0 then ws_drop(KEYS[key], C.dead) end
  if keep then
    ws_hset(Hd, L, i, L.low, sum, nc, nvv)
  else
    ws_hset(Hd, L, i, nil)
  end
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

-- ws_msweep checks a move of a record (m, t, c, v) of window L, counter key
-- (see ws_hdecide): a cost (> 0) under a limit (a number below 2^53), counted
-- in the current bucket once the buckets that left [m, low) are taken off t
-- (one HMGET of them and of the current bucket; the record's own bucket from
-- the record). It answers the new total and current bucket value, the
-- fields of the buckets that left to delete, and the field of the record's
-- bucket when it is still live (to get v, a flush), or nil, having written
-- nothing, when the move is not one a fast path takes: more than WS_SWEEP
-- buckets, or a year's start, or a clock behind the record, or a number that
-- would reach 2^53.
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
  -- (The fields to delete, those that hold a bucket, kept in names, in
  -- place: one table a move, not two.)
  local nx = 0
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
  local del = names
  local nv = cur + cost
  if mag >= WS_BIG or t - gone > limit - cost or cur <= -WS_BIG or nv >= WS_BIG or nv == 0 then return nil end
  local flush = nil
  if c >= low then flush = ws_fname(L, (c - y) / b) end
  return t - gone + cost, nv, del, flush
end

-- ws_mwrite writes a move's hash (see ws_msweep): the record's old bucket's
-- value v to its field when it is still live (a flush), the hash's expiry
-- (when the new current bucket leaves the window: the hash lives as long as
-- the record's bucket), and the buckets that left deleted.
local function ws_mwrite(L, hk, flush, v, del)
  -- (v passed as a string: Redis 7.0 writes a number argument with %.17g.)
  if flush ~= nil then redis.call('HSET', hk, flush, string.format('%d', v)) end
  redis.call('PEXPIREAT', hk, ws_expat(L, L.cstart + L.w))
  if #del > 0 then redis.call('HDEL', hk, unpack(del)) end
end

-- ws_hdecide is the fast paths' check of window L's record (m, t, c, v), or
-- of no record (c nil), of counter key, for a cost (> 0) under a limit (a
-- number below 2^53): when the cost fits and every number stays below 2^53,
-- it answers the new total and current bucket value, and how to write them
-- (kind), having written nothing; otherwise nil:
--   kind 0   the record is synced and on the current bucket: the head alone
--   kind 1   a move (ws_msweep: del, flush to write, ws_mwrite)
--   kind 2   a fresh start: the record's buckets have all left (or it has
--            none) and the counter's hash does not exist, so no bucket of
--            the window holds anything (one EXISTS): the cost is the sum
local function ws_hdecide(L, key, m, t, c, v, limit, cost)
  if c ~= nil then
    if c == L.cstart and m == L.low then
      if t > limit - cost or t <= -WS_BIG or v <= -WS_BIG or v + cost >= WS_BIG or v + cost == 0 then return nil end
      return t + cost, v + cost, 0
    end
    if c + L.w > L.now then
      local nt, nv, del, flush = ws_msweep(L, key, m, t, c, v, limit, cost)
      if nt == nil then return nil end
      return nt, nv, 1, del, flush
    end
  end
  if redis.call('EXISTS', KEYS[key]) ~= 0 then return nil end
  return cost, cost, 2
end

-- ws_hcount writes what ws_hdecide checked into record i of head Hd (nil:
-- a new one; the head written at the operation's end): the new total and
-- current bucket value, and a move's hash (ws_mwrite).
local function ws_hcount(L, Hd, i, key, nt, nv, kind, del, flush)
  if kind == 0 then
    local a = Hd.a
    a[i + 3], a[i + 5], Hd.dirty = nt, nv, true
    return
  end
  if kind == 1 then ws_mwrite(L, KEYS[key], flush, Hd.a[i + 5], del) end
  ws_hset(Hd, L, i, L.low, nt, L.cstart, nv)
end

-- The lean paths (ws_leanone, ws_leanlink) and their two halves, in a block
-- of their own: a chunk holds at most 200 locals.
local ws_leanone, ws_leanlink = nil, nil
do
  -- ws_leancheck is the check of the lean paths (ws_leanone, ws_leanlink): a
  -- cost (a number > 0) counted in the current bucket of window L's record of
  -- counter key, under limit (a number below 2^53), as ws_hdecide takes it,
  -- the record read from the head (one GET) in place (struct), no table. It
  -- answers the head read (or false), its number of records n, the record's
  -- index r (from 0; n: none; n + 1: not a head) and bucket value v, and
  -- ws_hdecide's new total, bucket value and write (nt, nv, kind, del,
  -- flush), nt nil when the lean path does not take it; it writes nothing.
  local function ws_leancheck(L, key, cost, limit)
    local s = redis.call('GET', KEYS[key + 1])
    local n, r = 0, 0
    if s then
      n = #s / (8 * WS_REC)
      if n < 1 or n % 1 ~= 0 then n, r = 0, 1 end -- (not a head: ws_hget says so)
      if n > 0 then
        local b, w = ws_unpack('<dd', s)
        while b ~= L.b or w ~= L.w do
          r = r + 1
          if r >= n then break end
          b, w = ws_unpack('<dd', s, 8 * WS_REC * r + 1)
        end
      end
    end
    if r <= n and cost > 0 and cost <= limit then
      local m, t, c, v
      if r < n then
        local _
        _, _, m, t, c, v = ws_unpack(WS_REC1, s, 8 * WS_REC * r + 1)
      end
      local nt, nv, kind, del, flush = ws_hdecide(L, key, m, t, c, v, limit, cost)
      return s, n, r, v, nt, nv, kind, del, flush
    end
    return s, n, r, nil, nil
  end

  -- ws_leanput writes what ws_leancheck checked: the record, in the head (SET,
  -- with the head's expiry after a move or a fresh start: the head lives
  -- until the latest of its records' buckets leaves), and a move's hash.
  local function ws_leanput(L, key, s, n, r, v, nt, nv, kind, del, flush)
    local hk = KEYS[key + 1]
    local ns = ws_pack(WS_REC1, L.b, L.w, L.low, nt, L.cstart, nv)
    if r < n and n > 1 then
      ns = string.sub(s, 1, 8 * WS_REC * r) .. ns .. string.sub(s, 8 * WS_REC * (r + 1) + 1)
    elseif r == n and n > 0 then
      ns = s .. ns
    end
    if kind == 0 then
      redis.call('SET', hk, ns, 'KEEPTTL')
      return
    end
    if kind == 1 then ws_mwrite(L, KEYS[key], flush, v, del) end
    local leave = L.cstart + L.w
    for q = 0, n - 1 do
      if q ~= r then
        local wq, _, _, cq = ws_unpack('<dddd', s, 8 * WS_REC * q + 9)
        if cq + wq > leave then leave = cq + wq end
      end
    end
    redis.call('SET', hk, ns, 'PXAT', ws_expat(L, leave))
  end

  -- ws_leanone is Add's and Allow's leanest path (see ops.lua): a cost (costs,
  -- a decimal string; > 0) counted in the current bucket of window L's
  -- record of counter key, under limit (a number below 2^53), as ws_hdecide
  -- takes it: one GET and one SET of the head (SET with the head's expiry
  -- after a move or a fresh start), the record read and written in place
  -- (struct), and no table but a move's. It answers the new window sum, or
  -- nil, having written nothing (the head it read is left for ws_hget:
  -- ws_seedk). It is ws_leancheck and then ws_leanput, written out: the two
  -- calls cost an Allow 3.5% more server instructions with 32 callers (51.4
  -- thousand against 49.6), 2.3% with one (callgrind, three runs each).
  ws_leanone = function(L, key, costs, limit)
    local hk = KEYS[key + 1]
    local s = redis.call('GET', hk)
    local cost = ws_tonum(costs)
    local n, r = 0, 0
    if s then
      n = #s / (8 * WS_REC)
      if n < 1 or n % 1 ~= 0 then n, r = 0, 1 end -- (not a head: ws_hget says so)
      if n > 0 then
        local b, w = ws_unpack('<dd', s)
        while b ~= L.b or w ~= L.w do
          r = r + 1
          if r >= n then break end
          b, w = ws_unpack('<dd', s, 8 * WS_REC * r + 1)
        end
      end
    end
    if r <= n and cost > 0 and cost <= limit then
      local m, t, c, v
      if r < n then
        local _
        _, _, m, t, c, v = ws_unpack(WS_REC1, s, 8 * WS_REC * r + 1)
      end
      local nt, nv, kind, del, flush = ws_hdecide(L, key, m, t, c, v, limit, cost)
      if nt ~= nil then
        local ns = ws_pack(WS_REC1, L.b, L.w, L.low, nt, L.cstart, nv)
        if r < n and n > 1 then
          ns = string.sub(s, 1, 8 * WS_REC * r) .. ns .. string.sub(s, 8 * WS_REC * (r + 1) + 1)
        elseif r == n and n > 0 then
          ns = s .. ns
        end
        if kind == 0 then
          redis.call('SET', hk, ns, 'KEEPTTL')
          return nt
        end
        if kind == 1 then ws_mwrite(L, KEYS[key], flush, v, del) end
        local leave = L.cstart + L.w
        for q = 0, n - 1 do
          if q ~= r then
            local wq, _, _, cq = ws_unpack('<dddd', s, 8 * WS_REC * q + 9)
            if cq + wq > leave then leave = cq + wq end
          end
        end
        redis.call('SET', hk, ns, 'PXAT', ws_expat(L, leave))
        return nt
      end
    end
    ws_seedk, ws_seeds = hk, s
    return nil
  end

  -- WS_LS is how many of ws_hscratch's slots ws_leanlink takes per limit.
  local WS_LS = 13

  -- ws_leanlink is ws_linklimits' leanest path (see group.lua): a link of
  -- groups of limits alone (gs, as ws_linkedlimits reads them) whose counters
  -- each have a head that no other limit of the link has, such as the limits
  -- of different keys (store.AllowAll per user, IP and device). Every limit
  -- is checked as ws_leanone checks it (ws_leancheck: one GET of its head, no
  -- table); when every one admits on that path, every record is written
  -- (ws_leanput) and it answers what ws_linklimits answers for an admitted
  -- link, {1, 0, {sum, 0, reset, 0}...} per group. Otherwise it answers nil,
  -- having written nothing, and leaves the heads it read to ws_hget
  -- (ws_seedm).
  ws_leanlink = function(H, gs)
    -- Before any read: costs above 0 and within their limits (a cost over
    -- its limit is refused whatever the counters hold: the general way
    -- answers it), limits below 2^53, heads all different.
    local S, x = ws_hscratch, 0
    for q = 1, #gs do
      local g = gs[q]
      for j = 0, g.n - 1 do
        local a, key = g.i + 4 * j, ws_ckey(g.k, j)
        local limit, cost, hk = ws_tonum(ARGV[a + 2]), ws_tonum(ARGV[a + 3]), KEYS[key + 1]
        if limit >= WS_BIG or cost <= 0 or cost > limit then return nil end
        for y = 1, x, WS_LS do
          if KEYS[S[y] + 1] == hk then return nil end
        end
        S[x + 1], S[x + 2], S[x + 3], S[x + 4] = key, ws_shape(H, ARGV[a + 1]), limit, cost
        x = x + WS_LS
      end
    end
    for y = 1, x, WS_LS do
      local s, n, r, v, nt, nv, kind, del, flush = ws_leancheck(S[y + 1], S[y], S[y + 3], S[y + 2])
      if nt == nil then
        local m = ws_seedm or {}
        ws_seedm = m
        m[KEYS[S[y] + 1]] = s
        for z = 1, y - 1, WS_LS do
          m[KEYS[S[z] + 1]], S[z + 4], S[z + 11] = S[z + 4], false, false
        end
        return nil
      end
      S[y + 4], S[y + 5], S[y + 6], S[y + 7], S[y + 8], S[y + 9], S[y + 10], S[y + 11], S[y + 12] = s, n, r, v or false, nt,
        nv, kind, del or false, flush or false
    end
    -- Every limit admits: count.
    local outs, y = {}, 1
    for q = 1, #gs do
      local out = {1, 0}
      for j = 0, gs[q].n - 1 do
        local L, nt = S[y + 1], S[y + 8]
        ws_leanput(L, S[y], S[y + 4], S[y + 5], S[y + 6], S[y + 7] or nil, nt, S[y + 9], S[y + 10], S[y + 11] or nil,
          S[y + 12] or nil)
        out[j + 3] = {nt, 0, L.target.start + L.w - L.now, 0}
        -- (No reference kept from one call to the next: heads, deletions.)
        S[y + 4], S[y + 11] = false, false
        y = y + WS_LS
      end
      outs[q] = out
    end
    return outs
  end
end

-- ws_fastopen is the open of a write to the current bucket under a limit
-- (Add, Allow, a group of limits; see ops.lua): when ws_hdecide takes the
-- counter's record, it answers the new total and bucket (doubles, exact) and
-- R, the record's index (> 0), or, for a move or a fresh start (kept in Hd:
-- one per head at a time), minus it (0: no record), which ws_fastcommit
-- writes (the head at the operation's end: no table per counter, and no
-- command but a move's); otherwise it answers nil, nil, nil and ws_open's
-- state. (ws_open(L, key, L.target, R) is the state of a counter on the fast
-- path, for a refusal.)
local function ws_fastopen(L, key, limit, cost)
  local Hd = ws_hget(L, key)
  local i = ws_hfind(Hd, L)
  if cost > 0 and cost <= limit and limit < WS_BIG and Hd.mvk == nil then
    local a, nt, nv, kind, del, flush = Hd.a, nil, nil, nil, nil, nil
    if i ~= nil then
      nt, nv, kind, del, flush = ws_hdecide(L, key, a[i + 2], a[i + 3], a[i + 4], a[i + 5], limit, cost)
    else
      nt, nv, kind = ws_hdecide(L, key, nil, nil, nil, nil, limit, cost)
    end
    if nt ~= nil then
      if kind == 0 then return nt, nv, i end
      Hd.mvk, Hd.mvdel, Hd.mvflush = kind, del, flush
      return nt, nv, -(i or 0)
    end
  end
  return nil, nil, nil, ws_open(L, key, L.target, i)
end

local function ws_fastcommit(L, key, nt, nv, R)
  local Hd = ws_hget(L, key)
  if R > 0 then
    local a = Hd.a
    a[R + 3], a[R + 5], Hd.dirty = nt, nv, true
    return
  end
  local i = nil
  if R < 0 then i = -R end
  ws_hcount(L, Hd, i, key, nt, nv, Hd.mvk, Hd.mvdel, Hd.mvflush)
  Hd.mvk, Hd.mvdel, Hd.mvflush = nil, nil, nil
end

-- ws_headmoves is ws_headlimits' path for n limits of one cost whose
-- counters share one head when some record is not synced: when ws_hdecide
-- takes every record (the synced ones inline: a key's coarser windows; a
-- move, as its finest one makes bucket after bucket, or a fresh start
-- through it), it counts the cost in each (the head written at the
-- operation's end) and answers {1, sum, reset, sum, reset...}; otherwise it
-- answers nil, having written nothing, and ws_wlimits takes the limits one
-- by one (the head read is ws_hget's).
local function ws_headmoves(H, P, costs, k, n)
  local hk = KEYS[k + 1]
  for j = 1, n - 1 do
    if KEYS[k + 2 * j + 1] ~= hk then return nil end
  end
  local cost = ws_tonum(costs)
  if cost <= 0 then return nil end
  local Hd = ws_hget(ws_shape(H, P[1]), k)
  local a, rn = Hd.a, WS_REC * Hd.n
  local out, S, ls, lim = {1, false, false, false, false, false, false}, ws_hscratch, nil, 0
  for j = 0, n - 1 do
    local b = 1 + 2 * j
    local L, l = ws_shape(H, P[b]), P[b + 1]
    if l ~= ls then lim, ls = ws_tonum(l), l end
    if cost > lim or lim >= WS_BIG then return nil end
    local r = WS_REC * j + 1
    if r > rn or a[r] ~= L.b or a[r + 1] ~= L.w then
      r = nil
      for q = 1, rn, WS_REC do
        if a[q] == L.b and a[q + 1] == L.w then r = q end
      end
    end
    local nt, nv, kind, del, flush = nil, nil, 0, nil, nil
    if r ~= nil and a[r + 2] == L.low and a[r + 4] == L.cstart then
      local t, v = a[r + 3], a[r + 5]
      if t <= lim - cost and t > -WS_BIG and v > -WS_BIG and v + cost < WS_BIG and v + cost ~= 0 then
        nt, nv = t + cost, v + cost
      end
    elseif r ~= nil then
      nt, nv, kind, del, flush = ws_hdecide(L, k + 2 * j, a[r + 2], a[r + 3], a[r + 4], a[r + 5], lim, cost)
    else
      nt, nv, kind = ws_hdecide(L, k + 2 * j, nil, nil, nil, nil, lim, cost)
    end
    if nt == nil then return nil end
    local x = 7 * j
    S[x + 1], S[x + 2], S[x + 3], S[x + 4], S[x + 5], S[x + 6], S[x + 7] = r or false, nt, nv, L, kind, del, flush
    out[2 * j + 2], out[2 * j + 3] = nt, L.reset
  end
  -- Every limit admits: count.
  for j = 0, n - 1 do
    local x = 7 * j
    local r, kind = S[x + 1], S[x + 5]
    if kind == 0 then
      a[r + 3], a[r + 5] = S[x + 2], S[x + 3]
    else
      ws_hcount(S[x + 4], Hd, r or nil, k + 2 * j, S[x + 2], S[x + 3], kind, S[x + 6], S[x + 7])
    end
    S[x + 4], S[x + 6], S[x + 7] = false, false, false
  end
  for x = 2 * n + 2, 7 do out[x] = nil end
  Hd.dirty = true
  return out
end

-- ws_headlimits is ws_wlimits' leanest path (see group.lua) for n limits of
-- one cost whose counters share one head (the windows of one key): costs
-- (the cost, a decimal string), P (each limit's shape and limit, see
-- ws_policies) and KEYS[k] on: each counter's hash and head (ws_ckey), or,
-- with shared (WS_OP_LIMITSH), the n hashes and then the head, declared once.
-- When the head holds exactly the n windows' records, in the limits' order,
-- and ws_hdecide takes each (a synced one inline: a key's coarser windows;
-- a move, as its finest makes bucket after bucket, and a fresh start
-- through it), it counts the cost in each record and answers {1, sum,
-- reset, sum, reset...}: one GET and one SET of the head, unpacked whole into
-- one table, and no function call for a synced limit (a script pays more for
-- its calls and table accesses than for its arithmetic). Otherwise it leaves
-- the head it read for ws_hget (ws_seedk) and answers what ws_headmoves
-- answers, or, with shared, nil (ws_hlimits goes on).
local function ws_headlimits(H, P, costs, k, n, shared)
  local hk, st = KEYS[k + 1], WS_KPC
  if shared then
    hk, st = KEYS[k + n], 1
  else
    for j = 1, n - 1 do
      if KEYS[k + 2 * j + 1] ~= hk then return nil end
    end
  end
  local s = redis.call('GET', hk)
  local cost = ws_tonum(costs)
  if s and #s == 8 * WS_REC * n and cost > 0 then
    local A = {ws_unpack(ws_fmt(n), s)}
    local shapes, out, ok, moved = H.shapes, {1, false, false, false, false, false, false}, true, nil
    -- (Per limit, the least the loop can do: the checks against constants
    -- worked out once, lc the room left under the limit, worked out when the
    -- limit changes; a synced record counted in place.)
    local nbig, vbig, ncost, ls, lc = -WS_BIG, WS_BIG - cost, -cost, nil, 0
    local r, b, kj = 0, 1, k
    for j = 1, n do
      local L, l = shapes[P[b]], P[b + 1]
      if L == nil then L = ws_shape(H, P[b]) end
      if l ~= ls then
        ls, lc = l, ws_tonum(l)
        if cost > lc or lc >= WS_BIG then
          ok = false
          break
        end
        lc = lc - cost
      end
      if A[r + 1] ~= L.b or A[r + 2] ~= L.w then
        ok = false
        break
      end
      local t, v = A[r + 4], A[r + 6]
      if A[r + 3] == L.low and A[r + 5] == L.cstart then
        if t > lc or t <= nbig or v <= nbig or v >= vbig or v == ncost then
          ok = false
          break
        end
        t = t + cost
        A[r + 4], A[r + 6] = t, v + cost
      else
        local kind, del, flush
        t, v, kind, del, flush = ws_hdecide(L, kj, A[r + 3], t, A[r + 5], v, lc + cost, cost)
        if t == nil then
          ok = false
          break
        end
        -- (A move is written once every limit has admitted: kept in moved,
        -- a table only when something moves.)
        if moved == nil then moved = {} end
        local x = #moved
        moved[x + 1], moved[x + 2], moved[x + 3], moved[x + 4], moved[x + 5], moved[x + 6] = r, kj, kind, del or false,
          flush or false, v
        A[r + 4] = t
      end
      out[2 * j], out[2 * j + 1] = t, L.reset
      r, b, kj = r + WS_REC, b + 2, kj + st
    end
    if ok then
      for x = 2 * n + 2, 7 do out[x] = nil end
      if moved == nil then
        redis.call('SET', hk, ws_pack(ws_fmt(n), unpack(A, 1, WS_REC * n)), 'KEEPTTL')
        return out
      end
      for x = 1, #moved, 6 do
        local q = moved[x]
        local L = shapes[P[1 + 2 * q / WS_REC]]
        if moved[x + 2] == 1 then ws_mwrite(L, KEYS[moved[x + 1]], moved[x + 4] or nil, A[q + 6], moved[x + 3]) end
        A[q + 3], A[q + 5], A[q + 6] = L.low, L.cstart, moved[x + 5]
      end
      -- The head lives until the latest of its records' buckets leaves.
      local leave, lq = -math.huge, nil
      for q = 0, WS_REC * (n - 1), WS_REC do
        local e = A[q + 5] + A[q + 2]
        if e > leave then leave, lq = e, q end
      end
      redis.call('SET', hk, ws_pack(ws_fmt(n), unpack(A, 1, WS_REC * n)), 'PXAT',
        ws_expat(shapes[P[1 + 2 * lq / WS_REC]], leave))
      return out
    end
  end
  ws_seedk, ws_seeds = hk, s
  if shared then return nil end
  return ws_headmoves(H, P, costs, k, n)
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
-- holds its last admission: one HMGET of a few fields (the record's bucket
-- from the head) answers its retry and reset, where the general path reads
-- every field and sorts them. (Near a year's end, whose last bucket may be
-- short, the buckets before the current one may not be found: the peek then
-- gives up.) It answers nil when C already read the counter whole, when the
-- window sum is not a double (past 2^53) or the magnitudes read could add up
-- to 2^53, when more than WS_PEEKUP buckets lie ahead, and, given the cost
-- and limit of a refusal, when what must leave for the cost to fit is more
-- than twice what WS_PEEK buckets of a window as full as this one hold on
-- average (a limit far below the sum): the few buckets would not settle it,
-- and the read would be wasted.
local function ws_peek(L, key, C, cost, limit)
  local sum = C.sum
  if C.all ~= nil or type(sum) ~= 'number' then return nil end
  if cost ~= nil and cost <= limit and (sum - (limit - cost)) * L.w > 2 * WS_PEEK * L.b * sum then return nil end
  local codes, starts = {}, {}
  local whole, s = ws_codes(L, L.low, L.cstart, WS_PEEK, codes, starts)
  if whole == nil then return nil end
  local nold = #codes
  local cur = C.cur
  if not whole and (not cur or tonumber(cur) == 0) then
    local from = L.cstart - WS_PEEK * L.b
    if from <= s then from, whole = s, true end
    if ws_codes(L, from, L.cstart, WS_PEEK, codes, starts) ~= true then return nil end
  end
  if not ws_codes(L, L.cstart, L.now + L.H.F + 1, WS_PEEKUP, codes, starts) then return nil end
  local raw = redis.call('HMGET', KEYS[key], unpack(codes))
  local c = C.hd.a[C.i + 4]
  local vals, mag = {}, sum < 0 and -sum or sum
  for j = 1, #codes do
    if starts[j] == c then raw[j] = string.format('%d', C.hd.a[C.i + 5]) end
    local v = 0
    if raw[j] then
      v = tonumber(raw[j])
      if v == nil then return nil end
    end
    vals[j], mag = v, mag + (v < 0 and -v or v)
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
  local all = (C ~= nil and C.all) or ws_read(key, L)
  return ws_scan(L, all, L.now - L.w, true)
end

-- Every write here moves a running total, answered or not: no write without
-- a read, so AddNoSum is Add without the answer (ws_addquiet, ops.lua).
local ws_addnosum = nil

local function ws_sumover(L, key, lb)
  if lb ~= L.w then return ws_scanread(L, key, lb) end
  local C = ws_open(L, key, L.target)
  return ws_checked(C.sum, C.fits)
end
