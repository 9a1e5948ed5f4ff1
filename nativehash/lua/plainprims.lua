-- The plain native hash, for servers without hash-field TTL: a counter is its
-- buckets' hash and its key's head, a record of six doubles per window
-- (struct.pack '<d...'): b, w, m, t, c, v as package nativehash's doc says,
-- each an integer below 2^53 (a counter beyond it keeps no record and is read
-- whole). A counter is two entries of KEYS, its hash then its head (WS_KPC);
-- the operations take it as the index of its hash (ws_ckey). An operation
-- reads a head once (ws_hget) and writes it once at its end if it changed
-- (ws_end), with the expiry of its newest record, in tables reused from one
-- operation to the next.

local WS_RESERVED = {m = true, t = true}

-- WS_KPC is how many entries of KEYS a counter takes (its hash and its head),
-- WS_REC how many numbers a head record holds.
local WS_KPC, WS_REC = 2, 6

-- ws_fmts caches the struct formats of heads by their number of records;
-- callers look there before they call ws_fmt, which makes one.
local ws_fmts = {}

local function ws_fmt(n)
  ws_fmts[n] = '<' .. string.rep('d', WS_REC * n)
  return ws_fmts[n]
end

-- ws_hc holds the heads the operation read (ws_hn of them), each {key, a =
-- the records' numbers, n = records, H, dirty (to write), moved (the expiry
-- may move)}, reused; past WS_HWALK heads they are found by key in ws_hmap.
local ws_hc, ws_hn, ws_hmap = {}, 0, nil
local WS_HWALK = 8

-- ws_begin forgets the heads, at a script's start; so does ws_abort, after
-- an operation failed (it changed none: a record changes only in a commit).
local function ws_begin() ws_hn, ws_hmap = 0, nil end
local ws_abort = ws_begin

-- ws_ckey is the j-th counter (from 0) of KEYS from k: its hash's index.
local function ws_ckey(k, j) return k + WS_KPC * j end

-- ws_hget returns the head of counter key, read once per operation (one not
-- windowstore's raises WS_E.NOTCOUNTER, or WRONGTYPE); pre, when a string,
-- is the head a caller read already (ws_sumrun's MGET).
local function ws_hget(L, key, pre)
  local hk = KEYS[key + 1]
  if ws_hmap ~= nil then
    local Hd = ws_hmap[hk]
    if Hd ~= nil then return Hd end
  else
    for j = 1, ws_hn do
      local Hd = ws_hc[j]
      if Hd.key == hk then return Hd end
    end
  end
  local s = pre or redis.call('GET', hk)
  ws_hn = ws_hn + 1
  local Hd = ws_hc[ws_hn]
  if Hd == nil then
    Hd = {key = hk, a = {}, n = 0, H = L.H, dirty = false, moved = false, ok = 0}
    ws_hc[ws_hn] = Hd
  else
    Hd.key, Hd.n, Hd.H, Hd.dirty, Hd.moved, Hd.ok = hk, 0, L.H, false, false, 0
  end
  if s then
    local n = #s / (8 * WS_REC)
    if n < 1 or n % 1 ~= 0 then
      ws_hn = ws_hn - 1
      ws_err(WS_E.NOTCOUNTER, 'a head that is not a counter\'s')
    end
    Hd.a, Hd.n = {ws_unpack(ws_fmts[n] or ws_fmt(n), s)}, n -- (one call; past its records, a holds unpack's position)
  end
  if ws_hmap ~= nil then
    ws_hmap[hk] = Hd
  elseif ws_hn > WS_HWALK then
    ws_hmap = {}
    for j = 1, ws_hn do ws_hmap[ws_hc[j].key] = ws_hc[j] end
  end
  return Hd
end

-- ws_hfind is the index in Hd.a of the record of window L, or nil.
local function ws_hfind(Hd, L)
  local a, b, w = Hd.a, L.b, L.w
  for i = 1, WS_REC * Hd.n, WS_REC do
    if a[i] == b and a[i + 1] == w then return i end
  end
  return nil
end

-- ws_recok reports whether a record's m, t, c and v are integers below 2^53,
-- as every counter's are.
local function ws_recok(m, t, c, v)
  local big = WS_BIG
  return m % 1 == 0 and t % 1 == 0 and c % 1 == 0 and v % 1 == 0 and m < big and m > -big and t < big and t > -big and
    c < big and c > -big and v < big and v > -big
end

-- ws_hcheck raises WS_E.NOTCOUNTER when record i of Hd fails ws_recok; Hd.ok
-- is the last record it passed since the head was read (a record's own
-- writes keep it so).
local function ws_hcheck(Hd, i)
  if Hd.ok == i then return end
  local a = Hd.a
  if not ws_recok(a[i + 2], a[i + 3], a[i + 4], a[i + 5]) then ws_err(WS_E.NOTCOUNTER, 'a head that is not a counter\'s') end
  Hd.ok = i
end

-- ws_hset writes window L's record into Hd (at i, or a new one), saved at the
-- operation's end; m nil drops it. It answers the record's index.
local function ws_hset(Hd, L, i, m, t, c, v)
  local a = Hd.a
  if i == nil then
    if m == nil then return nil end
    i = WS_REC * Hd.n + 1
    Hd.n, Hd.moved = Hd.n + 1, true
  end
  if m == nil then
    a[i], Hd.moved = 0, true -- dropped: ws_hsave leaves it out
  else
    if a[i + 4] ~= c then Hd.moved = true end
    a[i], a[i + 1], a[i + 2], a[i + 3], a[i + 4], a[i + 5] = L.b, L.w, m, t, c, v
  end
  Hd.dirty = true
  return i
end

-- ws_hsave writes head Hd: as it is, its expiry kept, when no record moved;
-- else without the records dropped or past their window, expiring with the
-- latest of its records' buckets (deleted when none is left).
local function ws_hsave(Hd)
  Hd.dirty = false
  local a, n = Hd.a, Hd.n
  if not Hd.moved then return redis.call('SET', Hd.key, ws_pack(ws_fmts[n] or ws_fmt(n), unpack(a, 1, WS_REC * n)), 'KEEPTTL') end
  Hd.moved = false
  local now, m, leave = Hd.H.now, 0, nil
  for i = 1, WS_REC * n, WS_REC do
    local e = a[i + 4] + a[i + 1]
    if a[i] ~= 0 and e > now then
      if m < i - 1 then
        for x = 0, WS_REC - 1 do a[m + 1 + x] = a[i + x] end
      end
      m = m + WS_REC
      if leave == nil or e > leave then leave = e end
    end
  end
  n = m / WS_REC
  Hd.n = n
  if n == 0 then return redis.call('DEL', Hd.key) end
  redis.call('SET', Hd.key, ws_pack(ws_fmts[n] or ws_fmt(n), unpack(a, 1, m)), 'PXAT', ws_expiry(Hd.H, leave))
end

-- ws_end writes the heads the operation changed, after its last write.
local function ws_end()
  for j = 1, ws_hn do
    local Hd = ws_hc[j]
    if Hd.dirty then ws_hsave(Hd) end
  end
  ws_hn, ws_hmap = 0, nil
end

-- ws_code is the field of the bucket that starts at s, when s is a bucket
-- start of window L within the three years around its clock; nil otherwise.
local function ws_code(L, s)
  local y
  if s >= L.nxt then
    y = L.nxt
  elseif s >= L.cur then
    y = L.cur
  elseif s >= L.prev then
    y = L.prev
  else
    return nil
  end
  local k = (s - y) / L.b
  if k % 1 ~= 0 then return nil end
  return string.format('%d', k)
end

-- ws_read reads a hash whole: a window extreme's (key, a name), or a
-- counter's (key, an index in KEYS; L, its window), the head's record's
-- bucket in place of its field.
local function ws_read(key, L)
  if type(key) == 'string' then return redis.call('HGETALL', key) end
  local all = redis.call('HGETALL', KEYS[key])
  local Hd = ws_hget(L, key)
  local i = ws_hfind(Hd, L)
  if i == nil then return all end
  ws_hcheck(Hd, i)
  local f = ws_code(L, Hd.a[i + 4])
  if f == nil then return all end
  local v = string.format('%d', Hd.a[i + 5])
  for j = 1, #all, 2 do
    if all[j] == f then
      all[j + 1] = v
      return all
    end
  end
  all[#all + 1], all[#all + 2] = f, v
  return all
end

-- ws_meta is what Inspect shows of the counter's record, as the reserved
-- fields m (its mark, Unix ms) and t (its running total): {} without one.
local function ws_meta(L, key)
  local Hd = ws_hget(L, key)
  local i = ws_hfind(Hd, L)
  if i == nil then return {} end
  ws_hcheck(Hd, i)
  return {'m', string.format('%d', Hd.a[i + 2]), 't', string.format('%d', Hd.a[i + 3])}
end

-- ws_life is the counter's remaining life (ms) for Inspect: its hash's or its
-- head's, the longer (-2: neither; -1: no expiry).
local function ws_life(key)
  local a, b = redis.call('PTTL', KEYS[key]), redis.call('PTTL', KEYS[key + 1])
  if a == -1 or b == -1 then return -1 end
  return math.max(a, b)
end

local function ws_drop(key, fields)
  ws_chunks(fields, function(...) redis.call('HDEL', key, ...) end)
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

-- No field has a TTL of its own: each lives as long as the key.
local function ws_ttls(key, fields, pttl)
  local out = {}
  for i = 1, #fields do out[i] = pttl end
  return out
end

-- ws_get reads one field (HMGET, which the plain hash's rule allows).
local function ws_get(key, field) return redis.call('HMGET', key, field)[1] end

-- ws_setx sets bucket B's field to v (a window extreme, see extreme.lua); a
-- new field makes the hash expire when B leaves the window (a late bucket
-- may only extend it).
local function ws_setx(L, key, B, v, new)
  redis.call('HSET', key, B.field, v)
  if new then ws_hexpire(L, key, B.start + L.w, not B.current) end
end
