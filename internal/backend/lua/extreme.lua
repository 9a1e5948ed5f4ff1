-- Window extremes: the greatest or least value of the window's events (max,
-- min; first and last seen are the least and greatest event time), dir
-- WS_X_MAX or WS_X_MIN (backend.XMax, XMin). A bucket keeps its own extreme
-- in its field; the window's is that of its live buckets. Values are
-- canonical decimal int64s, compared exactly; a value '' is the event's time.
-- A window of more than WS_XSMALL buckets caches its extreme in field
-- WS_XCACHE as "start:value" (start: the bucket holding it, the later of
-- two): while that bucket is live the cache is the window's extreme, so a
-- write reads two fields and a read one; once it has left (once per bucket at
-- most) the hash is read whole. dir WS_X_RECENT keeps the window's WS_RECENT
-- most recent values in WS_XCACHE alone, "start:ms:value" entries, newest
-- first, comma-separated, answered as {ms, value, ...}: an entry the list
-- dropped is older than every one it kept, so it leaves no later than they.

local WS_XCACHE = 'x'

-- WS_XSMALL is the most buckets a window has whose extremes are not cached.
local WS_XSMALL = 64

-- ws_xbeats reports whether a beats b in direction dir: canonical decimal
-- int64s compared by sign, then length, then digits.
local function ws_xbeats(dir, a, b)
  if dir == WS_X_MIN then a, b = b, a end
  -- now: does a > b?
  local na, nb = string.byte(a, 1) == 45, string.byte(b, 1) == 45
  if na ~= nb then return nb end
  if #a ~= #b then
    if na then return #a < #b end
    return #a > #b
  end
  if na then return a < b end
  return a > b
end

-- ws_xcheck raises WS_E.ARGS unless v is a canonical decimal int64.
local function ws_xcheck(v)
  if not string.find(v, '^%-?[1-9]%d*$') and v ~= '0' or #v > 20 or
      (#v == 19 and string.byte(v, 1) ~= 45 and v > '9223372036854775807') or
      (#v == 20 and v > '-9223372036854775808') then
    ws_err(WS_E.ARGS, 'not an int64: ' .. v)
  end
end

-- ws_xlive reports whether the bucket that starts at s is live at L's instant.
local function ws_xlive(L, s) return s >= L.low and s <= L.now + L.H.F end

-- ws_xscan reads the whole hash: the live buckets' extreme (nil: none) and its
-- bucket's start, the stale fields, and the reply; a field or value that is
-- not a counter's raises WS_E.NOTCOUNTER.
local function ws_xscan(L, key, dir)
  local all = ws_read(key)
  local best, bs, stale, ns = nil, nil, {}, 0
  for i = 1, #all, 2 do
    local f = all[i]
    if f ~= WS_XCACHE then
      local s = ws_fstart(L, f, tonumber(f))
      if s == nil then
        ns = ns + 1
        stale[ns] = f
      else
        local v = all[i + 1]
        if tonumber(v) == nil then ws_err(WS_E.NOTCOUNTER, 'a hash whose values are not all integers') end
        if best == nil or ws_xbeats(dir, v, best) or (v == best and s > bs) then best, bs = v, s end
      end
    end
  end
  return best, bs, stale, all
end

-- ws_xcached reads the cache: the extreme and its bucket's start; nil: none.
local function ws_xcached(L, key)
  local c = ws_get(key, WS_XCACHE)
  if not c then return nil end
  local sep = string.find(c, ':', 1, true)
  local s = sep and tonumber(string.sub(c, 1, sep - 1))
  if s == nil or not ws_xlive(L, s) then return nil end
  return string.sub(c, sep + 1), s
end

-- ws_xextreme is the window's extreme and its bucket's start (nil: none),
-- bucket B's value, the stale fields, and whether the cache is kept and must
-- be written again.
local function ws_xextreme(L, key, dir, B)
  local keep = L.w > WS_XSMALL * L.b
  if keep then
    local best, bs = ws_xcached(L, key)
    if best ~= nil then
      if B == nil then return best, bs end
      return best, bs, ws_get(key, B.field) or nil, {}, false, true
    end
  end
  local best, bs, stale, all = ws_xscan(L, key, dir)
  local cur = nil
  if B ~= nil then
    for i = 1, #all, 2 do
      if all[i] == B.field then cur = all[i + 1] end
    end
  end
  return best, bs, cur, stale, keep, keep
end

-- ws_rparse reads the recent values' list: its entries {s, t, e} (bucket
-- start, ms, the entry as stored), newest first, the live ones only.
local function ws_rparse(L, list)
  local out = {}
  for e in string.gmatch(list or '', '[^,]+') do
    local a = string.find(e, ':', 1, true)
    local c = a and string.find(e, ':', a + 1, true)
    local s, t = a and tonumber(string.sub(e, 1, a - 1)), c and tonumber(string.sub(e, a + 1, c - 1))
    if s == nil or t == nil then ws_err(WS_E.NOTCOUNTER, 'a hash whose values are not recent values') end
    if ws_xlive(L, s) then out[#out + 1] = {s = s, t = t, e = e} end
  end
  return out
end

-- ws_ranswer is the answer of the recent values' entries: {ms, value, ...}.
local function ws_ranswer(es)
  local out = {}
  for _, x in ipairs(es) do
    local c = string.find(x.e, ':', string.find(x.e, ':', 1, true) + 1, true)
    out[#out + 1] = string.format('%d', x.t)
    out[#out + 1] = string.sub(x.e, c + 1)
  end
  return out
end

-- ws_xprepare reads what writing v (a value, or '' for the event's time e)
-- to bucket B does: X.best, the answer after it; X.set, B's new value (nil:
-- unchanged; X.new: a new field); X.cache, the cache's (X.C its bucket,
-- X.cnew whether it sets the key's expiry); X.stale, the fields to delete.
-- Reads only (WRONGTYPE on a key of another type).
local function ws_xprepare(L, key, dir, v, e, B)
  if v == '' then v = string.format('%d', e or L.now) end
  ws_xcheck(v)
  local X = {best = nil, set = nil, new = false, cache = nil, C = nil, cnew = false, stale = {}}
  if dir == WS_X_RECENT then
    -- The new entry goes before the first that is not newer; the list keeps
    -- WS_RECENT, and the cache field lives as long as its latest bucket.
    local t = e or L.now
    local es, out, put, top = ws_rparse(L, ws_get(key, WS_XCACHE)), {}, false, B.start
    local new = {s = B.start, t = t, e = string.format('%d', B.start) .. ':' .. string.format('%d', t) .. ':' .. v}
    for _, x in ipairs(es) do
      if not put and x.t <= t then out[#out + 1], put = new, true end
      out[#out + 1] = x
    end
    if not put then out[#out + 1] = new end
    local list = {}
    for i = 1, math.min(#out, WS_RECENT) do
      list[i] = out[i].e
      if out[i].s > top then top = out[i].s end
    end
    for i = WS_RECENT + 1, #out do out[i] = nil end
    X.cache, X.C, X.best = table.concat(list, ','), {field = WS_XCACHE, start = top, current = top == L.cstart}, ws_ranswer(out)
    X.cnew = true -- the only field: it sets the key's expiry
    return X
  end
  local best, bs, cur, stale, rebuilt, keep = ws_xextreme(L, key, dir, B)
  X.new, X.stale = cur == nil, stale
  if cur == nil or ws_xbeats(dir, v, cur) then X.set = v end
  if best == nil or ws_xbeats(dir, v, best) or (v == best and B.start > bs) then
    best, bs, rebuilt = v, B.start, true
  end
  if keep and rebuilt then
    X.cache = string.format('%d', bs) .. ':' .. best
    X.C = {field = WS_XCACHE, start = bs, current = bs == L.cstart}
  end
  X.best = {best}
  return X
end

-- ws_xcommit writes what ws_xprepare found, and answers the value after.
local function ws_xcommit(L, key, X, B)
  if X.set ~= nil then ws_setx(L, key, B, X.set, X.new) end
  if X.cache ~= nil then ws_setx(L, key, X.C, X.cache, X.cnew) end
  if #X.stale > 0 then ws_drop(key, X.stale) end
  return X.best
end

-- ws_xget answers the window's value: {extreme} ({}: none), or the recent
-- values. It writes nothing.
local function ws_xget(L, key, dir)
  if dir == WS_X_RECENT then return ws_ranswer(ws_rparse(L, ws_get(key, WS_XCACHE))) end
  return {(ws_xextreme(L, key, dir, nil))}
end

-- ws_xans is a group item's answer: counted (1 or 0), then the value's.
local function ws_xans(counted, r) return {counted, unpack(r)} end
