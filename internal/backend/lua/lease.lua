-- Leases: how many holders of one key are in flight at once, decided in an
-- event (event.lua) with its other limits. A key's leases are one sorted set,
-- each member a lease id scored by the instant it ends unless refreshed; the
-- key expires with its last lease, so a holder that crashed frees its lease.
--
-- WS_IT_ACQUIRE takes lease id for ttl ms if fewer than max are held (an id
-- held fits, and is refreshed); WS_IT_REFRESH ends it ttl ms from now, and
-- WS_IT_RELEASE now, if held. Each answers held (after it), ok (1: it
-- acquired, refreshed or released), retry (a refused acquire's wait until the
-- first held lease ends; -1 when max is 0), refused (1: it did not fit).

-- ws_lopen reads an item's leases at instant now: whether its id holds one,
-- how many are held, and whether an acquire fits. Reads only.
local function ws_lopen(it, now)
  local s = redis.call('ZSCORE', it.key, it.id)
  it.mine = s ~= false and s ~= nil and tonumber(s) > now
  it.held = redis.call('ZCOUNT', it.key, string.format('(%d', now), '+inf')
  if it.kind == WS_IT_ACQUIRE then it.fits = it.mine or it.held < it.limit end
end

-- ws_lretry is the wait until an acquire that does not fit might: until the
-- first held lease ends; -1 when none ever fits (max 0).
local function ws_lretry(it, now)
  if it.limit < 1 then return -1 end
  local first = redis.call('ZRANGEBYSCORE', it.key, string.format('(%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] == nil then return 0 end
  return tonumber(first[2]) - now
end

-- ws_lwrite does an item's write and answers it; allowed is the event's
-- decision; seen, a duplicate's record (it writes nothing).
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
