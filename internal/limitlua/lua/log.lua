-- The exact sliding log: a sorted set per key, one member per admitted unit
-- of cost, scored by the clock in ms. An event at score s is live while
-- s > now - window, so it leaves at s + window.
--
-- ARGV: clock ("" for the server's TIME), window ms, limit, cost, nonce.
-- Reply: {allowed, count, retry ms, reset ms}. A refusal writes nothing: the
-- events that have left are removed by the next admitted call, and the key
-- expires with its newest event.

local key = KEYS[1]
local now, srv = ws_clock(ARGV[1])
local w, limit, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local thr = '(' .. string.format('%d', now - w)
local count = redis.call('ZCOUNT', key, thr, '+inf')

-- reset: the time until the newest event leaves.
local function reset(c)
  if c == 0 then return 0 end
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return tonumber(last[2]) + w - now
end

if count <= limit - n then
  if n > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
    local add = {}
    for i = 1, n do
      add[#add + 1] = now
      add[#add + 1] = ARGV[5] .. i
    end
    redis.call('ZADD', key, unpack(add))
    if srv == nil then srv = ws_srvnow() end
    redis.call('PEXPIREAT', key, srv + w)
  end
  return {1, count + n, 0, reset(count + n)}
end
if n > limit then return {0, count, -1, reset(count)} end
-- Refused: the request fits once the (count + n - limit) oldest live events
-- have left, that is when the k-th oldest leaves.
local k = count + n - limit
local e = redis.call('ZRANGE', key, thr, '+inf', 'BYSCORE', 'LIMIT', k - 1, 1, 'WITHSCORES')
return {0, count, tonumber(e[2]) + w - now, reset(count)}
