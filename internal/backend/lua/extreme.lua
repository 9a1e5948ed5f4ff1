-- Window extremes: the greatest or least value of the window's events. A
-- bucket keeps its own extreme (one field per bucket, as a counter keeps its
-- amount); the window's is the extreme of its live buckets. Package store
-- keeps the max and min of amounts with them, and first and last seen as the
-- least and greatest event time. Values are int64s as canonical decimal
-- strings (as the client sends them), compared exactly, never as doubles.
--
--   WS_OP_XPUT  shape dir value time    a write: {extreme} after it
--   WS_IT_EXTREME shape dir value       a group's item (see group.lua)
--   (read, in sum.lua: shape dir)       {extreme}, or {} when no event is live
--
-- dir is WS_X_MAX ('>', keep the greatest) or WS_X_MIN ('<', the least); time
-- is the event's Unix ms, or '' for now. A value '' is the event's time (first
-- and last seen).
--
-- dir WS_X_RECENT keeps the most recent values instead (the last K): a
-- bucket's field holds its WS_RECENT most recent events as "ms:value"
-- entries, newest first, comma-separated, and the window's are the WS_RECENT
-- most recent of its live buckets, answered as {ms, value, ms, value, ...},
-- newest first. Of two events of the same ms, the later written is the more
-- recent. A bucket never needs more: the window's most recent WS_RECENT take
-- at most that many from any one bucket. (WS_RECENT is package backend's
-- MaxRecent.)

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

-- ws_xcheck raises WS_E_ARGS unless v is a canonical decimal int64: it
-- guards the comparison above, which trusts the form.
local function ws_xcheck(v)
  if not string.find(v, '^%-?[1-9]%d*$') and v ~= '0' or #v > 20 or
      (#v == 19 and string.byte(v, 1) ~= 45 and v > '9223372036854775807') or
      (#v == 20 and v > '-9223372036854775808') then
    ws_err(WS_E_ARGS, 'not an int64: ' .. v)
  end
end

-- ws_xscan reads the whole hash: the live buckets' extreme (nil: none; for
-- WS_X_RECENT, their fields and values, flat), the
-- fields of the buckets that have left the window, and the flat reply. A
-- field that is not a bucket code, or a value that is not a number, raises
-- WS_E_NOTCOUNTER, before anything is written. (ws_scan's loop, without the
-- tables of starts and values a sum's answers need.)
local function ws_xscan(L, key, dir)
  local all = ws_read(key)
  local lo, hi, plo, phi, nhi = L.lo, L.hi, L.plo, L.phi, L.nhi
  local best, stale, ns = nil, {}, 0
  for i = 1, #all, 2 do
    local f = all[i]
    local k = tonumber(f)
    local b1 = string.byte(f, 1)
    if k == nil or k < 0 or k % 1 ~= 0 or b1 < 48 or b1 > 57 or (b1 == 48 and #f > 1) then
      ws_err(WS_E_NOTCOUNTER, 'a hash whose fields are not bucket codes')
    end
    if (k >= lo and k <= hi) or (k >= plo and k <= phi) or k <= nhi then
      local v = all[i + 1]
      if dir == WS_X_RECENT then
        if best == nil then best = {} end
        best[#best + 1], best[#best + 2] = f, v
      else
        if tonumber(v) == nil then ws_err(WS_E_NOTCOUNTER, 'a hash whose values are not all integers') end
        if best == nil or ws_xbeats(dir, v, best) then best = v end
      end
    else
      ns = ns + 1
      stale[ns] = f
    end
  end
  return best, stale, all
end

-- ws_rentries parses a bucket's recent values into entries {t, s, r}: the
-- event's ms, the entry as stored ("ms:value"), its rank in the bucket (1:
-- the newest).
local function ws_rentries(list, out)
  local r = 0
  for e in string.gmatch(list, '[^,]+') do
    local c = string.find(e, ':', 1, true)
    local t = c and tonumber(string.sub(e, 1, c - 1))
    if t == nil then ws_err(WS_E_NOTCOUNTER, 'a hash whose values are not recent values') end
    r = r + 1
    out[#out + 1] = {t = t, s = e, r = r}
  end
  return out
end

-- ws_ranswer is the window's WS_RECENT most recent entries of lists (the
-- live buckets' values), as {ms, value, ...}, newest first.
local function ws_ranswer(lists)
  local es = {}
  for _, l in ipairs(lists) do ws_rentries(l, es) end
  table.sort(es, function(a, b)
    if a.t ~= b.t then return a.t > b.t end
    return a.r < b.r
  end)
  local out = {}
  for i = 1, math.min(#es, WS_RECENT) do
    local e = es[i].s
    local c = string.find(e, ':', 1, true)
    out[#out + 1] = string.sub(e, 1, c - 1)
    out[#out + 1] = string.sub(e, c + 1)
  end
  return out
end

-- ws_xprepare reads what writing v (a value, or '' for the event's time e,
-- nil: now) to bucket B does: X.best, the answer after it ({extreme}, or {}
-- for none; WS_X_RECENT: its list); X.set, the value B's field takes (nil:
-- unchanged; X.new: a new field); X.stale, the fields to delete. It writes
-- nothing, and raises WRONGTYPE on a key of another type.
local function ws_xprepare(L, key, dir, v, e, B)
  if v == '' then v = string.format('%d', e or L.now) end
  ws_xcheck(v)
  local best, stale, all = ws_xscan(L, key, dir)
  local cur = nil
  for i = 1, #all, 2 do
    if all[i] == B.field then cur = all[i + 1] end
  end
  local X = {best = nil, set = nil, new = cur == nil, stale = stale}
  if dir == WS_X_RECENT then
    -- B's list with the new entry before the first that is not newer.
    local t = e or L.now
    local es, list, put = ws_rentries(cur or '', {}), {}, false
    for _, x in ipairs(es) do
      if not put and x.t <= t then
        list[#list + 1], put = string.format('%d', t) .. ':' .. v, true
      end
      list[#list + 1] = x.s
    end
    if not put then list[#list + 1] = string.format('%d', t) .. ':' .. v end
    X.set = table.concat(list, ',', 1, math.min(#list, WS_RECENT))
    local lists, live = {X.set}, best or {}
    for j = 1, #live, 2 do
      if live[j] ~= B.field then lists[#lists + 1] = live[j + 1] end
    end
    X.best = ws_ranswer(lists)
    return X
  end
  if cur == nil or ws_xbeats(dir, v, cur) then
    X.set = v
    if best == nil or ws_xbeats(dir, v, best) then best = v end
  end
  X.best = {best}
  return X
end

-- ws_xcommit writes what ws_xprepare found, and answers the value after.
local function ws_xcommit(L, key, X, B)
  if X.set ~= nil then ws_setx(L, key, B, X.set, X.new) end
  if #X.stale > 0 then ws_drop(key, X.stale) end
  return X.best
end

local function ws_xput(L, key, dir, v, e)
  local B = ws_target(L, e)
  if B == nil then
    ws_err(WS_E_TOOOLD, "the event's bucket has left the window; nothing was written")
  end
  return ws_xcommit(L, key, ws_xprepare(L, key, dir, v, e, B), B)
end

-- ws_xget answers the window's value: {extreme} ({}: none), or the recent
-- values.
local function ws_xget(L, key, dir)
  local best = ws_xscan(L, key, dir)
  if dir == WS_X_RECENT then
    local lists, live = {}, best or {}
    for j = 2, #live, 2 do lists[#lists + 1] = live[j] end
    return ws_ranswer(lists)
  end
  return {best}
end

-- ws_xans is a group item's answer: counted (1 or 0), then the value's.
local function ws_xans(counted, r)
  return {counted, unpack(r)}
end
