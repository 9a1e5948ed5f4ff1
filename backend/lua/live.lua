-- The header every counter script starts with, and the live buckets of a
-- window shape at the script's instant.
--
-- ARGV header (see backend.Header):
--   1     clock: Unix ms of a client clock, or "" for the server's TIME
--   2..6  starts of the five years around the client's clock, Unix ms
--   7     future tolerance ms: how far ahead of the clock an event may be
--
-- Field codes are year-stripped (package fieldcodec): a bucket's code is its
-- index within its year, so a code means a different instant in each year.
-- A bucket is live at instant now when it starts after now - window. Buckets
-- up to the tolerance ahead of now (written by a client whose clock is a
-- little ahead) are live too. So the live codes form at most two ranges:
--
--          year before           |        this year          |   next year
--   ... [plo ...... phi]         | [lo .... c .. hi]         | [0 .. nhi]
--        ^ now - window          |          ^ now    ^ now + tolerance
--
-- with the year-before range only within a window of January 1st, and the
-- next-year range only within the tolerance of the next one.

-- ws_header reads ARGV's header.
local function ws_header(a)
  local H = {}
  H.now, H.srv = ws_clock(a[1])
  local y = {tonumber(a[2]), tonumber(a[3]), tonumber(a[4]), tonumber(a[5]), tonumber(a[6])}
  local i = 0
  for j = 2, 4 do
    if y[j] <= H.now and H.now < y[j + 1] then i = j end
  end
  if i == 0 then
    ws_err(WS_E_CLOCK, 'the server clock ' .. H.now .. ' is more than a year from the client clock')
  end
  H.prev, H.cur, H.nxt = y[i - 1], y[i], y[i + 1]
  H.F = tonumber(a[7])
  H.shapes = {}
  return H
end

-- ws_expiry turns an instant on the script's clock into server Unix ms.
local function ws_expiry(H, at)
  if H.srv == nil then H.srv = ws_srvnow() end
  return H.srv + (at - H.now)
end

-- ws_shape returns the live buckets of a window shape ("bucketms:windowms")
-- at the header's instant, computed once per shape and script call:
--   b, w        bucket and window ms
--   c, cstart   the current bucket's code and start; field, its field name
--   lo..hi      live codes of this year; plo..phi of the year before; 0..nhi
--               of the next (an empty range has lo > hi)
--   low         the start of the oldest live bucket
local function ws_shape(H, shape)
  local L = H.shapes[shape]
  if L ~= nil then return L end
  local sep = string.find(shape, ':', 1, true)
  local b, w = tonumber(string.sub(shape, 1, sep - 1)), tonumber(string.sub(shape, sep + 1))
  local now, prev, cur, nxt = H.now, H.prev, H.cur, H.nxt
  L = {H = H, b = b, w = w, now = now, prev = prev, cur = cur, nxt = nxt}
  L.c = math.floor((now - cur) / b)
  L.cstart = cur + L.c * b
  L.field = string.format('%d', L.c)
  local thr, top = now - w, now + H.F
  if thr >= cur then
    L.lo, L.plo, L.phi = math.floor((thr - cur) / b) + 1, 1, 0
  else
    L.lo = 0
    L.plo = math.floor((thr - prev) / b) + 1
    L.phi = math.ceil((cur - prev) / b) - 1
  end
  L.hi = math.min(math.floor((top - cur) / b), math.ceil((nxt - cur) / b) - 1)
  L.nhi = -1
  if top >= nxt then L.nhi = math.floor((top - nxt) / b) end
  if L.plo <= L.phi then L.low = prev + L.plo * b else L.low = cur + L.lo * b end
  L.target = {field = L.field, start = L.cstart, current = true}
  H.shapes[shape] = L
  return L
end

-- ws_start returns the start of the live bucket with code k (a number), or
-- nil when no live bucket has that code.
local function ws_start(L, k)
  if k >= L.lo and k <= L.hi then return L.cur + k * L.b end
  if k >= L.plo and k <= L.phi then return L.prev + k * L.b end
  if k >= 0 and k <= L.nhi then return L.nxt + k * L.b end
  return nil
end

-- ws_target returns the bucket an event at instant e (nil: now) counts in, as
-- {field, start, current}; nil when that bucket has already left the window
-- (a late event). An event ahead of now within the tolerance counts in the
-- current bucket; one further ahead raises WS_E_FUTURE.
local function ws_target(L, e)
  if e == nil or e >= L.now then
    if e ~= nil and e > L.now + L.H.F then
      ws_err(WS_E_FUTURE, 'the event time is ' .. (e - L.now) .. ' ms ahead of the clock, beyond the tolerance of ' ..
        L.H.F .. ' ms; nothing was written')
    end
    return L.target
  end
  local y = L.prev
  if e >= L.cur then y = L.cur end
  local k = math.floor((e - y) / L.b)
  local s = y + k * L.b
  if s <= L.now - L.w then return nil end
  return {field = string.format('%d', k), start = s, current = s == L.cstart}
end
