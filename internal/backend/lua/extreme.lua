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

-- ws_xscan reads the whole hash: the live buckets' extreme (nil: none), the
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
      if tonumber(v) == nil then ws_err(WS_E_NOTCOUNTER, 'a hash whose values are not all integers') end
      if best == nil or ws_xbeats(dir, v, best) then best = v end
    else
      ns = ns + 1
      stale[ns] = f
    end
  end
  return best, stale, all
end

-- ws_xprepare reads what writing v (a value, or '' for the event's time e,
-- nil: now) to bucket B does: X.best, the window's extreme after it; X.set,
-- the value B's field takes (nil: unchanged; X.new: a new field); X.stale,
-- the fields to delete.
-- It writes nothing, and raises WRONGTYPE on a key of another type.
local function ws_xprepare(L, key, dir, v, e, B)
  if v == '' then v = string.format('%d', e or L.now) end
  ws_xcheck(v)
  local best, stale, all = ws_xscan(L, key, dir)
  local cur = nil
  for i = 1, #all, 2 do
    if all[i] == B.field then cur = all[i + 1] end
  end
  local X = {best = best, set = nil, new = cur == nil, stale = stale}
  if cur == nil or ws_xbeats(dir, v, cur) then
    X.set = v
    if best == nil or ws_xbeats(dir, v, best) then X.best = v end
  end
  return X
end

-- ws_xcommit writes what ws_xprepare found, and answers the extreme after.
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
  return {ws_xcommit(L, key, ws_xprepare(L, key, dir, v, e, B), B)}
end

local function ws_xget(L, key, dir)
  local best = ws_xscan(L, key, dir)
  if best == nil then return {} end
  return {best}
end
