package backend

// ClockLua is the Lua every windowstore script starts with, here and in
// package limit: errors in the windowstore style, and the server's clock.
//
//	ws_err(code, msg)  raises "CODE windowstore: msg" as an error reply
//	ws_srvnow()        the server's clock (TIME) in Unix ms
//	ws_clock(arg)      the script's instant: arg as Unix ms, or ws_srvnow() for ""
const ClockLua = `
local function ws_err(code, msg)
  error(redis.error_reply(code .. ' windowstore: ' .. msg))
end

local function ws_srvnow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ws_clock(arg)
  if arg == '' then
    local now = ws_srvnow()
    return now, now
  end
  return tonumber(arg), nil
end
`

// prelude is the Lua shared by every backend's scripts: the clock, the live
// ranges of field codes, and the classification of a counter's fields. It is
// the Lua twin of fieldcodec.Codec.Live; the integration suite checks the two
// against each other on real servers (TestLuaMatchesCodec).
//
// ARGV layout (see Args):
//
//	1 clock: Unix ms of a client clock, or "" to read the server's TIME
//	2 bucket ms     3 window ms     4 lookback ms
//	5..9 starts of the five years around the client's clock (fieldcodec.YearStarts)
//	10.. operation arguments
const prelude = ClockLua + `
local WS_BIG = 9007199254740992 -- 2^53: doubles are exact below it

-- ws_live computes the instant and the live code ranges over the window.
local function ws_live(a)
  local L = {}
  L.now, L.srv = ws_clock(a[1])
  L.b = tonumber(a[2])
  L.w = tonumber(a[3])
  L.lb = tonumber(a[4])
  local y = {tonumber(a[5]), tonumber(a[6]), tonumber(a[7]), tonumber(a[8]), tonumber(a[9])}
  local i = 0
  for j = 2, 4 do
    if y[j] <= L.now and L.now < y[j + 1] then i = j end
  end
  if i == 0 then
    ws_err('WSCLOCK', 'server clock ' .. L.now .. ' is more than a year from the client clock')
  end
  L.cur, L.prev = y[i], y[i - 1]
  L.c = math.floor((L.now - L.cur) / L.b)
  L.field = string.format('%d', L.c)
  L.cstart = L.cur + L.c * L.b
  local thr = L.now - L.w
  if thr >= L.cur then
    L.lo, L.plo, L.phi = math.floor((thr - L.cur) / L.b) + 1, 1, 0
  else
    L.lo = 0
    L.plo = math.floor((thr - L.prev) / L.b) + 1
    L.phi = math.ceil((L.cur - L.prev) / L.b) - 1
  end
  return L
end

-- ws_expiry turns an instant on the script's clock into server Unix ms.
local function ws_expiry(L, at)
  if L.srv == nil then L.srv = ws_srvnow() end
  return L.srv + (at - L.now)
end

-- ws_scan classifies the fields of a flat {field, value, ...} reply. It sums the
-- live values within the lookback, lists the live buckets (start, value) within
-- the window, and lists the stale fields. A field that is not a bucket code is
-- an error: the key is not a counter, and nothing has been written yet.
--
-- A code is decimal digits with no leading zero; the check looks at the first
-- byte and the number only, since building a string per field costs more than
-- the rest of the loop. (It lets "1e3" through as 1000: no counter writes that.)
-- With keep, it also lists the live buckets' starts and values (for Allow).
local function ws_scan(L, all, keep)
  local S = {sum = 0, big = false, stale = {}}
  if keep then S.starts, S.vals = {}, {} end
  local lthr = L.now - L.lb
  local lo, c, plo, phi, cur, prev, b = L.lo, L.c, L.plo, L.phi, L.cur, L.prev, L.b
  local sum, big, nstale = 0, false, 0
  for i = 1, #all, 2 do
    local f = all[i]
    local code = tonumber(f)
    local b1 = string.byte(f, 1)
    if code == nil or code < 0 or code % 1 ~= 0 or b1 < 48 or b1 > 57 or (b1 == 48 and #f > 1) then
      ws_err('WSNOTCOUNTER', 'the key holds fields that are not bucket codes; it is not a counter')
    end
    local s
    if code >= lo and code <= c then
      s = cur + code * b
    elseif code >= plo and code <= phi then
      s = prev + code * b
    end
    if s == nil then
      nstale = nstale + 1
      S.stale[nstale] = f
    else
      local v = tonumber(all[i + 1])
      if v == nil then
        ws_err('WSNOTCOUNTER', 'the key holds a value that is not an integer; it is not a counter')
      end
      if v >= WS_BIG or v <= -WS_BIG then big = true end
      if keep then
        S.starts[#S.starts + 1] = s
        S.vals[#S.vals + 1] = v
      end
      if s > lthr then sum = sum + v end
    end
  end
  if sum >= WS_BIG or sum <= -WS_BIG then big = true end
  S.sum, S.big = sum, big
  return S
end

-- Exact int64 sums, for when doubles are not enough: a value is split into
-- hi * 1e9 + lo with both parts exact doubles, and the parts are added apart.
local WS_E9 = 1000000000

local function ws_split(v)
  local neg = string.sub(v, 1, 1) == '-'
  local d = neg and string.sub(v, 2) or v
  local hi, lo = 0, tonumber(d)
  if #d > 9 then
    hi = tonumber(string.sub(d, 1, #d - 9))
    lo = tonumber(string.sub(d, #d - 8))
  end
  if neg then return -hi, -lo end
  return hi, lo
end

-- ws_exactsum adds delta (a string) and the live values within the lookback,
-- exactly, and returns the decimal string; or nil when it leaves int64.
local function ws_exactsum(L, all, delta)
  local hi, lo = ws_split(delta)
  local lthr = L.now - L.lb
  for i = 1, #all, 2 do
    local code = tonumber(all[i])
    local s
    if code >= L.lo and code <= L.c then s = L.cur + code * L.b
    elseif code >= L.plo and code <= L.phi then s = L.prev + code * L.b end
    if s ~= nil and s > lthr then
      local h, l = ws_split(all[i + 1])
      hi, lo = hi + h, lo + l
    end
  end
  local carry = lo >= 0 and math.floor(lo / WS_E9) or -math.floor(-lo / WS_E9)
  hi, lo = hi + carry, lo - carry * WS_E9
  if hi > 0 and lo < 0 then hi, lo = hi - 1, lo + WS_E9
  elseif hi < 0 and lo > 0 then hi, lo = hi + 1, lo - WS_E9 end
  if hi > 9223372036 or (hi == 9223372036 and lo > 854775807) then return nil end
  if hi < -9223372036 or (hi == -9223372036 and lo < -854775808) then return nil end
  if hi == 0 then return string.format('%d', lo) end
  return string.format('%d%09d', hi, math.abs(lo))
end

-- ws_chunks calls fn with the items of list in slices small enough to unpack.
local function ws_chunks(list, fn)
  for i = 1, #list, 1000 do
    fn(unpack(list, i, math.min(i + 999, #list)))
  end
end

-- ws_reset is the time until every live non-zero bucket has left the window.
local function ws_reset(L, S)
  local last = nil
  for i = 1, #S.starts do
    if S.vals[i] ~= 0 and (last == nil or S.starts[i] > last) then last = S.starts[i] end
  end
  if last == nil then return 0 end
  return last + L.w - L.now
end

-- ws_retry is the time until enough buckets have left the window for cost to
-- fit under limit, or -1 when it never will.
local function ws_retry(L, S, cost, limit)
  if cost > limit then return -1 end
  local order = {}
  for i = 1, #S.starts do order[i] = i end
  table.sort(order, function(x, y) return S.starts[x] < S.starts[y] end)
  local rem = S.sum
  for _, i in ipairs(order) do
    rem = rem - S.vals[i]
    if rem + cost <= limit then return S.starts[i] + L.w - L.now end
  end
  return -1
end
`

// Operation bodies. They call the functions every backend supplies (see Ops);
// ws_incr must write nothing when the increment fails (overflow, not an
// integer), so that every script leaves the key untouched on error.
const (
	bodyAdd = `
local key = KEYS[1]
local L = ws_live(ARGV)
local all = ws_read(key)
local S = ws_scan(L, all)
local delta = ARGV[10]
local sum = S.sum + tonumber(delta)
local exact = nil
if S.big or sum >= WS_BIG or sum <= -WS_BIG or math.abs(tonumber(delta)) >= WS_BIG then
  exact = ws_exactsum(L, all, delta)
  if exact == nil then
    ws_err('WSOVERFLOW', 'the window sum would leave the int64 range; nothing was written')
  end
end
ws_incr(L, key, delta)
if #S.stale > 0 then ws_drop(key, S.stale) end
if exact ~= nil then return exact end
return sum
`
	bodyAddNoSum = `
local key = KEYS[1]
local L = ws_live(ARGV)
ws_incr(L, key, ARGV[10])
ws_tidy(L, key)
return 1
`
	bodySum = `
local key = KEYS[1]
local L = ws_live(ARGV)
local all = ws_read(key)
local S = ws_scan(L, all)
if #S.stale > 0 then ws_drop(key, S.stale) end
if S.big then
  local exact = ws_exactsum(L, all, '0')
  if exact == nil then ws_err('WSOVERFLOW', 'the window sum leaves the int64 range') end
  return exact
end
return S.sum
`
	bodyAllow = `
local key = KEYS[1]
local L = ws_live(ARGV)
local all = ws_read(key)
local S = ws_scan(L, all, true)
if S.big then
  ws_err('WSOVERFLOW', 'the window sum is beyond 2^53; Allow cannot decide exactly')
end
local limit, cost = tonumber(ARGV[10]), tonumber(ARGV[11])
if S.sum + cost <= limit then
  if cost ~= 0 then
    ws_incr(L, key, ARGV[11])
    S.starts[#S.starts + 1] = L.cstart
    S.vals[#S.vals + 1] = cost
  end
  if #S.stale > 0 then ws_drop(key, S.stale) end
  return {1, S.sum + cost, 0, ws_reset(L, S)}
end
if #S.stale > 0 then ws_drop(key, S.stale) end
return {0, S.sum, ws_retry(L, S, cost, limit), ws_reset(L, S)}
`
	bodyInspect = `
local key = KEYS[1]
local L = ws_live(ARGV)
local all = ws_read(key)
local pttl = redis.call('PTTL', key)
local fields = {}
for i = 1, #all, 2 do fields[#fields + 1] = all[i] end
local ttls = ws_ttls(key, fields, pttl)
local out = {L.now, pttl}
for i = 1, #all, 2 do
  out[#out + 1] = all[i]
  out[#out + 1] = all[i + 1]
  out[#out + 1] = ttls[(i + 1) / 2]
end
return out
`
)
