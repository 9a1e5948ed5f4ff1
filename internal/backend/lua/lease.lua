-- Leases: a limit on how many holders of one key are in flight at once,
-- decided in a group (group.lua) with the group's other limits.
--
-- A key's leases are one sorted set: each member a lease id, its score the
-- instant (on the script's clock, Unix ms) at which the lease ends unless it
-- is refreshed. A lease is held while its end is after now. Ended leases are
-- removed by the next write, and the key expires when its last lease ends,
-- so a holder that crashed frees its lease within its time to live.
--
--   WS_IT_ACQUIRE  max ttl id   take lease id for ttl ms if fewer than max
--                               leases are held: a limit of the group, all
--                               or nothing with the others. An id already
--                               held always fits, and is refreshed: a resent
--                               acquire takes one lease, not two.
--   WS_IT_REFRESH  max ttl id   end lease id ttl ms from now, if it is held
--   WS_IT_RELEASE  max ttl id   end lease id now, if it is held
--
-- (max and ttl are ignored where unused.) Each item answers {held, ok, retry
-- ms, refused}: held is the number of leases held after it; ok is 1 when it
-- acquired, refreshed or released the lease; refused is 1 when an acquire
-- did not fit (in a duplicate: the first call's); retry, for such an acquire,
-- is the time until the first held lease ends (a release may free one
-- sooner), -1 when max is 0, and 0 otherwise.

-- ws_lopen reads an item's leases at instant now: whether its id holds one,
-- how many are held, and whether an acquire fits. Reads only.
local function ws_lopen(it, now)
  local s = redis.call('ZSCORE', it.key, it.id)
  it.mine = s ~= false and s ~= nil and tonumber(s) > now
  it.held = redis.call('ZCOUNT', it.key, string.format('(%d', now), '+inf')
  if it.kind == WS_IT_ACQUIRE then
    it.fits = it.mine or it.held < it.limit
  end
end

-- ws_lretry is the wait until an acquire that does not fit might: until the
-- first held lease ends; -1 when none ever fits (max 0).
local function ws_lretry(it, now)
  if it.limit < 1 then return -1 end
  local first = redis.call('ZRANGEBYSCORE', it.key, string.format('(%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] == nil then return 0 end
  return tonumber(first[2]) - now
end

-- ws_lwrite does an item's write, when it has one (see the table above),
-- and answers {held, ok, retry ms, refused}. allowed is the group's
-- decision; seen reports a duplicate, which writes nothing and answers the
-- first call's decision.
local function ws_lwrite(it, H, allowed, seen)
  local kind, now, key = it.kind, H.now, it.key
  local ok, held, retry, refused = 0, it.held, 0, 0
  if kind == WS_IT_ACQUIRE then
    if allowed then ok = 1 end
    if it.refused then retry, refused = it.retry, 1 end
  elseif it.mine then
    ok = 1
  end
  if seen or ok == 0 then return {held, ok, retry, refused} end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
  if kind == WS_IT_RELEASE then
    redis.call('ZREM', key, it.id)
    return {held - 1, ok, retry, refused}
  end
  redis.call('ZADD', key, string.format('%d', now + it.ttl), it.id)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, string.format('%d', ws_expiry(H, tonumber(last[2]))))
  if not it.mine then held = held + 1 end
  return {held, ok, retry, refused}
end
