-- The fixed window: a hash {w = window index, n = count} per key that expires
-- when its window ends. Windows are aligned on multiples of the window since
-- the Unix epoch.
--
-- ARGV: clock ("" for the server's TIME), window ms, limit, cost.
-- Reply: {allowed, count, retry ms, reset ms}. A refusal writes nothing.

local key = KEYS[1]
local now, srv = ws_clock(ARGV[1])
local w, limit, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local idx = math.floor(now / w)
local left = (idx + 1) * w - now
local cur = redis.call('HMGET', key, 'w', 'n')
local count = 0
if cur[1] and tonumber(cur[1]) == idx then count = tonumber(cur[2]) or 0 end
if count <= limit - n then
  if n > 0 then
    if count == 0 then
      redis.call('HSET', key, 'w', string.format('%d', idx), 'n', n)
    else
      redis.call('HINCRBY', key, 'n', n)
    end
    if srv == nil then srv = ws_srvnow() end
    redis.call('PEXPIREAT', key, srv + left)
  end
  local reset = 0
  if count + n > 0 then reset = left end
  return {1, count + n, 0, reset}
end
if n > limit then return {0, count, -1, left} end
return {0, count, left, left}
