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
  L.cur, L.prev, L.nxt = y[i], y[i - 1], y[i + 1]
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
  local nlive = 0
  for i = 1, #all, 2 do
    local f = all[i]
    local code = tonumber(f)
    local b1 = string.byte(f, 1)
    local s
    if code == nil and (f == 'm' or f == 't') then
      -- the running total and its mark (see WS_SWEEP), not a bucket
    elseif code == nil or code < 0 or code % 1 ~= 0 or b1 < 48 or b1 > 57 or (b1 == 48 and #f > 1) then
      ws_err('WSNOTCOUNTER', 'the key holds fields that are not bucket codes; it is not a counter')
    elseif code >= lo and code <= c then
      s = cur + code * b
    elseif code >= plo and code <= phi then
      s = prev + code * b
    else
      nstale = nstale + 1
      S.stale[nstale] = f
    end
    if s ~= nil then
      nlive = nlive + 1
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
  S.sum, S.big, S.live = sum, big, nlive
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
    if code == nil then -- m or t: not a bucket
    elseif code >= L.lo and code <= L.c then s = L.cur + code * L.b
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

-- ws_low is the start of the oldest live bucket (Unix ms, script's clock).
local function ws_low(L)
  if L.plo <= L.phi then return L.prev + L.plo * L.b end
  return L.cur + L.lo * L.b
end

-- WS_SWEEP is how many buckets a write may sweep one by one (see ws_dead); a
-- counter idle for longer is read whole instead.
local WS_SWEEP = 32

-- ws_dead lists the codes of the buckets that start in [from, to): the ones
-- that left the window between a write whose oldest live bucket started at
-- from and now (to = ws_low(L)). A bucket that ends a year may be short, so
-- the walk steps to the next year's start when it gets there. It returns nil
-- when there are more than WS_SWEEP codes, or when from is not a bucket start
-- of this year or the last (a counter of another window, or idle for long).
local function ws_dead(L, from, to)
  local codes, s = {}, from
  while s < to do
    local y, ny
    if s >= L.cur then y, ny = L.cur, L.nxt
    elseif s >= L.prev then y, ny = L.prev, L.cur
    else return nil end
    local k = (s - y) / L.b
    if k % 1 ~= 0 or #codes == WS_SWEEP then return nil end
    codes[#codes + 1] = string.format('%d', k)
    s = math.min(s + L.b, ny)
  end
  return codes
end

-- ws_errmsg is the message of an error that pcall caught: Redis 7.0 hands
-- over a string ("WRONGTYPE ..."), later servers a table {err = ...}.
local function ws_errmsg(e)
  if type(e) == 'table' and e.err then return e.err end
  return tostring(e)
end

-- ws_result turns what pcall returned into one entry of a batch's reply: the
-- value, or an error reply that keeps the error's code (WRONGTYPE, OOM, WS...).
local function ws_result(ok, r)
  if ok then return r end
  local msg = ws_errmsg(r)
  if not string.find(msg, '^[A-Z][A-Z_]* ') then msg = 'ERR windowstore: ' .. msg end
  return redis.error_reply(msg)
end
`

// scanLib follows a backend's primitives (Prims): the operations over a full
// read of the counter (ws_read). The FieldTTL and TairHash backends use them as
// they are (ScanOps); the plain hash falls back on them when its running total
// cannot answer.
const scanLib = `
-- ws_scansum is the sum over the lookback, exactly: a number when doubles hold
-- it, else its decimal string. It writes nothing.
local function ws_scansum(L, key)
  local all = ws_read(key)
  local S = ws_scan(L, all)
  if S.big then
    local exact = ws_exactsum(L, all, '0')
    if exact == nil then ws_err('WSOVERFLOW', 'the window sum leaves the int64 range') end
    return exact
  end
  return S.sum
end

local function ws_scanadd(L, key, delta)
  local all = ws_read(key)
  local S = ws_scan(L, all)
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
end

local function ws_scanaddnosum(L, key, delta)
  ws_incr(L, key, delta)
  return 1
end

-- ws_decide is Allow's answer from a full read. With write, it writes the
-- cost when it fits and deletes stale fields; without, it writes nothing (the
-- plain hash's caller has written already, and its running total counts every
-- field it holds).
local function ws_decide(L, key, limit, cost, write)
  local all = ws_read(key)
  local S = ws_scan(L, all, true)
  if S.big then
    ws_err('WSOVERFLOW', 'the window sum is beyond 2^53; Allow cannot decide exactly')
  end
  local c = tonumber(cost)
  if S.sum + c <= limit then
    if c ~= 0 and write then
      ws_incr(L, key, cost)
      S.starts[#S.starts + 1] = L.cstart
      S.vals[#S.vals + 1] = c
    end
    if write and #S.stale > 0 then ws_drop(key, S.stale) end
    return {1, S.sum + c, 0, ws_reset(L, S)}
  end
  if write and #S.stale > 0 then ws_drop(key, S.stale) end
  return {0, S.sum, ws_retry(L, S, c, limit), ws_reset(L, S)}
end

local function ws_scanallow(L, key, limit, cost) return ws_decide(L, key, limit, cost, true) end
`

// ScanOps binds the four operations to the scan-based ones: every operation
// reads the whole counter.
const ScanOps Ops = `
local ws_add, ws_addnosum, ws_allow, ws_sum = ws_scanadd, ws_scanaddnosum, ws_scanallow, ws_scansum
`

// Operation bodies. Each backend's Ops defines ws_add(L, key, delta),
// ws_addnosum(L, key, delta), ws_allow(L, key, limit, cost) and
// ws_sum(L, key); the scan-based ones above serve when it has nothing better.
// An operation must either fail before it writes, or leave the counter's sum
// as it was (a sweep), so that a failed operation changes no count.
const (
	// bodyWrite runs a batch of writes on one clock: ARGV 10.. holds, per
	// operation, its code and arguments, and KEYS its key:
	//
	//	a delta         Add: the new sum (an integer, or an exact decimal string)
	//	n delta         AddNoSum: 1
	//	w limit cost    Allow: {allowed, sum, retry ms, reset ms}
	//
	// The reply has one entry per operation, an error reply where it failed;
	// one operation failing does not stop the others.
	bodyWrite = `
local L = ws_live(ARGV)
local out, k, i = {}, 1, 10
while i <= #ARGV do
  local op, key, ok, r = ARGV[i], KEYS[k]
  if op == 'a' then
    ok, r = pcall(ws_add, L, key, ARGV[i + 1]); i = i + 2
  elseif op == 'n' then
    ok, r = pcall(ws_addnosum, L, key, ARGV[i + 1]); i = i + 2
  elseif op == 'w' then
    ok, r = pcall(ws_allow, L, key, tonumber(ARGV[i + 1]), ARGV[i + 2]); i = i + 3
  else
    ws_err('WSARGS', 'unknown operation ' .. tostring(op))
  end
  out[k] = ws_result(ok, r)
  k = k + 1
end
return out
`
	// bodySum answers the sums of all its keys, one entry each (an error
	// reply where one failed). It is read-only: it deletes nothing, so a
	// replica can run it.
	bodySum = `
local L = ws_live(ARGV)
local out = {}
for k = 1, #KEYS do out[k] = ws_result(pcall(ws_sum, L, KEYS[k])) end
return out
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
