-- GCRA, the generic cell rate algorithm: one string per key holding the
-- theoretical arrival time (TAT). A unit of cost moves it on by T = p / q ms;
-- a cost is admitted when, after it, the TAT is at most burst x T ahead of
-- now. The TAT is kept exactly, "ms rem q" (rem in units of 1/q ms), and the
-- arithmetic works in units of 1/q ms relative to now, below burst x p: exact
-- in doubles (the constructor bounds them). ARGV: clock ("" for the server's
-- TIME), p, q, burst, cost; a negative cost gives units back (the TAT moves
-- back, never before now). Reply: {allowed, used, retry ms, reset ms}, used
-- being burst less the whole units free now. A refusal writes nothing; the key
-- expires at its TAT.

local key = KEYS[1]
local now, srv = ws_clock(ARGV[1])
local p, q, burst, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

-- idiv is the floored quotient and remainder of integers a and b > 0, exact
-- where a / b rounded to a double would land on the next integer.
local function idiv(a, b)
  local d = math.floor(a / b)
  local r = a - d * b
  if r < 0 then
    d, r = d - 1, r + b
  elseif r >= b then
    d, r = d + 1, r - b
  end
  return d, r
end

-- ceilms turns a time in 1/q ms into whole ms, rounded up: a retry at that
-- instant is never early.
local function ceilms(x)
  local d, r = idiv(x, q)
  if r > 0 then d = d + 1 end
  return d
end

-- rel: the TAT less now, in 1/q ms, and never below 0 (a TAT in the past is
-- a fresh key).
local rel = 0
local v = redis.call('GET', key)
if v then
  local ms, rem, sq = string.match(v, '^(%-?%d+) (%d+) (%d+)$')
  if ms == nil then ws_err('WRONGTYPE', 'the key does not hold a GCRA state') end
  ms, rem, sq = tonumber(ms), tonumber(rem), tonumber(sq)
  if sq ~= q then -- written with another rate: round the remainder up
    rem = math.ceil(rem * q / sq)
  end
  rel = (ms - now) * q + rem
  if rel < 0 then rel = 0 end
end

local cap = burst * p -- burst x T, in 1/q ms
local free = idiv(cap - rel, p)
if free < 0 then free = 0 end

if n > burst then return {0, burst - free, -1, ceilms(rel)} end
local after = rel + n * p
if after > cap then return {0, burst - free, ceilms(after - cap), ceilms(rel)} end
if after <= 0 then
  after = 0
  if n < 0 then redis.call('DEL', key) end
elseif n ~= 0 then
  local ms, rem = idiv(after, q)
  if srv == nil then srv = ws_srvnow() end
  redis.call('SET', key, string.format('%d %d %d', now + ms, rem, q), 'PXAT', string.format('%d', srv + ceilms(after)))
end
return {1, burst - idiv(cap - after, p), 0, ceilms(after)}
