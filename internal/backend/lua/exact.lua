-- Exact int64 arithmetic.
--
-- Lua's numbers are doubles. An integer is exact below 2^53 (WS_BIG) in
-- magnitude, and so is every partial sum of integers whose magnitudes add up
-- to less than 2^53: that bound (a "mag", kept beside every sum), not the
-- final sum, decides whether doubles are enough; past it, the exact path.
--
-- On the exact path a value v is the pair (hi, lo) with v = hi * 1e9 + lo and
-- both parts exact doubles of v's sign: an int64 has at most 19 digits, so hi
-- is below 2^34, and the parts of up to 2^19 values add up exactly.

local WS_BIG = 9007199254740992 -- 2^53
local WS_E9 = 1000000000

-- ws_split parses a decimal int64 (a string) into (hi, lo).
local function ws_split(v)
  local neg = string.byte(v, 1) == 45 -- '-'
  local d = neg and string.sub(v, 2) or v
  local hi, lo = 0, tonumber(d)
  if #d > 9 then
    hi = tonumber(string.sub(d, 1, #d - 9))
    lo = tonumber(string.sub(d, #d - 8))
  end
  if hi == nil or lo == nil or string.find(d, '^%d+$') == nil then
    ws_err(WS_E.NOTCOUNTER, 'a hash whose values are not all integers')
  end
  if neg then return -hi, -lo end
  return hi, lo
end

-- ws_splitnum turns an integer held exactly by a double into (hi, lo).
local function ws_splitnum(n)
  local hi = n >= 0 and math.floor(n / WS_E9) or -math.floor(-n / WS_E9)
  return hi, n - hi * WS_E9
end

-- ws_norm brings (hi, lo) to canonical form: |lo| < 1e9, and lo of hi's sign.
local function ws_norm(hi, lo)
  local carry = lo >= 0 and math.floor(lo / WS_E9) or -math.floor(-lo / WS_E9)
  hi, lo = hi + carry, lo - carry * WS_E9
  if hi > 0 and lo < 0 then
    hi, lo = hi - 1, lo + WS_E9
  elseif hi < 0 and lo > 0 then
    hi, lo = hi + 1, lo - WS_E9
  end
  return hi, lo
end

-- ws_sign is -1, 0 or 1: the sign of (hi, lo).
local function ws_sign(hi, lo)
  hi, lo = ws_norm(hi, lo)
  if hi > 0 or (hi == 0 and lo > 0) then return 1 end
  if hi < 0 or (hi == 0 and lo < 0) then return -1 end
  return 0
end

-- ws_fits reports whether (hi, lo) is within int64.
local function ws_fits(hi, lo)
  hi, lo = ws_norm(hi, lo)
  if hi > 9223372036 or (hi == 9223372036 and lo > 854775807) then return false end
  if hi < -9223372036 or (hi == -9223372036 and lo < -854775808) then return false end
  return true
end

-- ws_num returns (hi, lo) as a double when that is exact, else as its
-- decimal string: the form every sum leaves a script in.
local function ws_num(hi, lo)
  hi, lo = ws_norm(hi, lo)
  if hi == 0 then return lo end
  if hi < 9007199 and hi > -9007199 then return hi * WS_E9 + lo end
  if hi < 0 then return string.format('-%d%09d', -hi, -lo) end
  return string.format('%d%09d', hi, lo)
end

-- ws_pair reads a sum as ws_num leaves it (a number or a string) into (hi, lo).
local function ws_pair(v)
  if type(v) == 'number' then return ws_splitnum(v) end
  return ws_split(v)
end

-- ws_str formats a sum (a number or a decimal string) as a decimal string.
local function ws_str(v)
  if type(v) == 'number' then return string.format('%d', v) end
  return v
end

-- ws_plus returns a + delta exactly (a as ws_num leaves it, delta a decimal
-- string), and whether the result is within int64.
local function ws_plus(a, delta)
  local d = tonumber(delta)
  if type(a) == 'number' and d < WS_BIG and d > -WS_BIG then
    local n = a + d
    if n < WS_BIG and n > -WS_BIG then return n, true end
  end
  local hi, lo = ws_pair(a)
  local h, l = ws_split(delta)
  hi, lo = hi + h, lo + l
  return ws_num(hi, lo), ws_fits(hi, lo)
end

-- ws_addsum returns sum + delta (sum as ws_num leaves it, delta a decimal
-- string), exactly; or raises WS_E.OVERFLOW, having written nothing, when it
-- leaves int64 (of: what the error names, the window sum unless given).
local function ws_addsum(sum, delta, of)
  local n, ok = ws_plus(sum, delta)
  if not ok then ws_err(WS_E.OVERFLOW, (of or 'the window sum') .. ' would leave the int64 range; nothing was written') end
  return n
end

-- ws_bucketplus returns a bucket's value (cur, as stored) plus delta, as
-- ws_addsum does; WS_E.NOTCOUNTER when cur is not an integer.
local function ws_bucketplus(cur, delta)
  local v = tonumber(cur)
  if v == nil or v >= WS_BIG or v <= -WS_BIG then v = cur end
  return ws_addsum(v, delta, 'the bucket')
end

-- ws_le reports whether sum (a double, or a decimal string past 2^53) <= x
-- (an exact double).
local function ws_le(sum, x)
  if type(sum) == 'number' then return sum <= x end
  local hi, lo = ws_split(sum)
  local xh, xl = ws_splitnum(x)
  return ws_sign(hi - xh, lo - xl) <= 0
end
