-- The header every counter script starts with, and the live buckets of a
-- window shape at the script's instant.
--
-- ARGV's header is backend.Header's: the clock, then "y1 y2 y3 y4 y5
-- future[ trace]" (the five years' starts, the future tolerance, a trace).
--
-- Field codes are year-stripped (package fieldcodec): a bucket's index within
-- its year. A bucket is live at now when it starts after now - window, or
-- up to the tolerance ahead (a client clock a little ahead). So the live
-- codes form at most two ranges:
--
--          year before           |        this year          |   next year
--   ... [plo ...... phi]         | [lo .... c .. hi]         | [0 .. nhi]
--        ^ now - window          |          ^ now    ^ now + tolerance
--
-- with the year-before range only within a window of January 1st, and the
-- next-year range only within the tolerance of the next one.

-- ws_memo keeps the last header and its shapes from one call to the next
-- (Redis Functions): the calls of one instant share them. Only a client-clock
-- header's server time (srv) is each call's own (ws_expiry).
local ws_memo = {H = nil, a1 = nil, a2 = nil}

-- ws_header reads ARGV's header; H.trace is its trace ('' for none).
local function ws_header(a)
  local M = ws_memo
  if a[1] ~= '' and M.H ~= nil and M.a1 == a[1] and M.a2 == a[2] then
    M.H.srv = nil -- (the last client-clock header: this call reads its own server time)
    return M.H
  end
  local now, srv = ws_clock(a[1])
  if srv ~= nil and M.H ~= nil and M.a1 == '' and M.H.now == now and M.a2 == a[2] then return M.H end
  local y1, y2, y3, y4, y5, f, trace = string.match(a[2] or '', '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+) ?(.*)$')
  if f == nil or now == nil then ws_err(WS_E.ARGS, 'a malformed header') end
  y2, y3, y4 = tonumber(y2), tonumber(y3), tonumber(y4)
  local prev, cur, nxt
  if y2 <= now and now < y3 then
    prev, cur, nxt = tonumber(y1), y2, y3
  elseif y3 <= now and now < y4 then
    prev, cur, nxt = y2, y3, y4
  else
    y5 = tonumber(y5)
    if y4 <= now and now < y5 then
      prev, cur, nxt = y3, y4, y5
    else
      ws_err(WS_E.CLOCK, 'the server clock ' .. now .. ' is more than a year from the client clock')
    end
  end
  local H = {now = now, srv = srv, prev = prev, cur = cur, nxt = nxt, F = tonumber(f), trace = trace, shapes = {}}
  M.H, M.a1, M.a2 = H, a[1], a[2]
  return H
end

-- ws_expiry turns an instant on the script's clock into server Unix ms.
local function ws_expiry(H, at)
  if H.srv == nil then H.srv = ws_srvnow() end
  return H.srv + (at - H.now)
end

-- ws_shape returns the live buckets of a window shape ("bucketms:windowms")
-- at the header's instant, computed once per shape and header (a header may
-- serve several calls: see ws_memo):
--   b, w, low   bucket and window ms; the start of the oldest live bucket
--   c, cstart   the current bucket's code and start; field, its field name
--   lo..hi      live codes of this year; plo..phi of the year before; 0..nhi
--               of the next (an empty range has lo > hi)
--   reset       ms from the instant until the current bucket leaves the window
--   dead        the plain hash's codes of the buckets that left since each mark (ws_recsum)
-- A shape's table is kept from call to call (at most 256 shapes), filled in
-- place for each new header so as to make no garbage.
local ws_shape = nil
do
  local kept, nk = {}, 0
  ws_shape = function(H, shape)
    local L = H.shapes[shape]
    if L ~= nil then return L end
    L = kept[shape]
    if L == nil then
      local sep = string.find(shape, ':', 1, true)
      L = {H = H, b = tonumber(string.sub(shape, 1, sep - 1)), w = tonumber(string.sub(shape, sep + 1)), now = 0, prev = 0,
        cur = 0, nxt = 0, c = 0, cstart = 0, field = '', lo = 0, hi = 0, plo = 0, phi = 0, nhi = 0, low = 0, reset = 0,
        target = {field = '', start = 0, current = true}, dead = false, xs = false, xsrv = false}
      if nk >= 256 then kept, nk = {}, 0 end
      kept[shape], nk = L, nk + 1
    end
    local b, w = L.b, L.w
    local now, prev, cur, nxt = H.now, H.prev, H.cur, H.nxt
    local floor = math.floor
    local c = floor((now - cur) / b)
    local cstart = cur + c * b
    local thr, top = now - w, now + H.F
    local lo, plo, phi
    if thr >= cur then
      lo, plo, phi = floor((thr - cur) / b) + 1, 1, 0
    else
      lo, plo, phi = 0, floor((thr - prev) / b) + 1, math.ceil((cur - prev) / b) - 1
    end
    local hi = math.min(floor((top - cur) / b), math.ceil((nxt - cur) / b) - 1)
    local nhi = -1
    if top >= nxt then nhi = floor((top - nxt) / b) end
    L.xs, L.xsrv = false, false
    if c == L.c and cur == L.cur and lo == L.lo and plo == L.plo and hi == L.hi and nhi == L.nhi and prev == L.prev and
        nxt == L.nxt then
      L.H, L.now, L.reset = H, now, cstart + w - now -- (the same live buckets: only the instant moves)
      H.shapes[shape] = L
      return L
    end
    local low
    if plo <= phi then low = prev + plo * b else low = cur + lo * b end
    local field = string.format('%d', c)
    L.H, L.now, L.prev, L.cur, L.nxt, L.c, L.cstart, L.field = H, now, prev, cur, nxt, c, cstart, field
    L.lo, L.hi, L.plo, L.phi, L.nhi, L.low, L.reset = lo, hi, plo, phi, nhi, low, cstart + w - now
    L.dead = false
    local T = L.target
    T.field, T.start, T.current = field, cstart, true
    H.shapes[shape] = L
    return L
  end
end

-- ws_limits parses WS_OP_LIMITS's list "shape limit cost ..." into {kind,
-- shape, limit, cost as sent, cost, the shape's ws_shape at H, ...},
-- remembered (at most 64 lists: a list repeats from call to call; a caller
-- whose header is not L.H calls ws_shape again); one that is not such a list
-- raises WS_E.ARGS.
local ws_limits = nil
do
  local memo, n = {}, 0
  ws_limits = function(H, s)
    local P, x = memo[s], 0
    if P ~= nil then return P end
    P = {}
    for shape, limit, cost in string.gmatch(s, '(%S+) (%S+) (%S+)') do
      P[x + 1], P[x + 2], P[x + 3], P[x + 4], P[x + 5], x = WS_IT_LIMIT, shape, tonumber(limit), cost, tonumber(cost), x + 6
      if P[x - 3] == nil or P[x - 1] == nil or not string.find(shape, ':', 1, true) then x = 0 break end
      P[x] = ws_shape(H, shape)
    end
    if x == 0 or select(2, string.gsub(s, '%S+', '')) * 2 ~= x then ws_err(WS_E.ARGS, 'a malformed list of limits') end
    if n >= 64 then memo, n = {}, 0 end
    memo[s], n = P, n + 1
    return P
  end
end

-- ws_start returns the start of the live bucket with code k (a number), or
-- nil when no live bucket has that code.
local function ws_start(L, k)
  if k >= L.lo and k <= L.hi then return L.cur + k * L.b end
  if k >= L.plo and k <= L.phi then return L.prev + k * L.b end
  if k >= 0 and k <= L.nhi then return L.nxt + k * L.b end
  return nil
end

-- ws_fstart is ws_start of field f (k: tonumber(f)). A field that is not a
-- code raises WS_E.NOTCOUNTER: a code is decimal digits with no leading zero
-- (the check looks at the first byte and the number only: it lets "1e3"
-- through, which no counter writes).
local function ws_fstart(L, f, k)
  local b1 = string.byte(f, 1)
  if k == nil or k < 0 or k % 1 ~= 0 or b1 < 48 or b1 > 57 or (b1 == 48 and #f > 1) then
    ws_err(WS_E.NOTCOUNTER, 'a hash whose fields are not bucket codes')
  end
  return ws_start(L, k)
end

-- ws_target returns the bucket an event at instant e (nil: now) counts in, as
-- {field, start, current}; nil when that bucket has already left the window
-- (a late event). An event ahead of now within the tolerance counts in the
-- current bucket; one further ahead raises WS_E.FUTURE.
local function ws_target(L, e)
  if e == nil or e >= L.now then
    if e ~= nil and e > L.now + L.H.F then
      ws_err(WS_E.FUTURE, 'the event time is ' .. (e - L.now) .. ' ms ahead of the clock, beyond the tolerance of ' ..
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
