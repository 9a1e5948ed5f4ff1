-- Distinct counts: a HyperLogLog per bucket, and the union of the live ones,
-- kept so that a count is PFCOUNT of one key, whose cached cardinality Redis
-- reuses until the key changes. A distinct count of one window is three keys
-- in its counter's slot and two scratch keys, every one declared in KEYS by
-- the caller (a key a script names itself may have moved away during a slot
-- migration):
--
--   D     a hash: the HyperLogLog of every bucket but the current one, by
--         bucket start (Unix ms), and "s", the state D:u was built for:
--         "<current bucket start>:<oldest live bucket start>"
--   D:c   the current bucket's HyperLogLog (whose start "s" names)
--   D:u   the union of every live bucket: D's live fields and D:c
--   D:t   scratch, never left behind; since it never exists, a call that
--         declares it while the slot is migrating is refused before it runs
--         (TRYAGAIN), never run on a node that does not hold every key
--   D:s   scratch too, for a count that builds a union of its own
--
-- While "s" matches the script's instant, an add is PFADD to D:c and to D:u,
-- and its count PFCOUNT D:u. Once per bucket (when the current bucket or the
-- oldest live one changes), the first add moves D:c into D, deletes what has
-- left the window and rebuilds D:u (ws_dsync): the cost of the window's
-- length, paid once a bucket rather than by every count. A count alone never
-- writes: until an add has brought the keys to its instant, or over a span
-- shorter than the window, it builds a union in scratch. D's fields are
-- bucket starts, not year-stripped codes, so that a view at another instant
-- (Store.At) can always tell a bucket that has left the window (deleted)
-- from one ahead of its instant (kept). Every key expires when the newest
-- bucket leaves the window.

-- ws_dk returns the five keys of a distinct count whose first key is KEYS[k].
-- (synced: ws_dsync has run in this call.)
local function ws_dk(k)
  return {h = KEYS[k], c = KEYS[k + 1], u = KEYS[k + 2], t = KEYS[k + 3], s = KEYS[k + 4], synced = false}
end

-- ws_dstate is the state "s" of the shape's instant.
local function ws_dstate(L)
  local st = L.dstate
  if st == nil then
    st = string.format('%d:%d', L.cstart, L.low)
    L.dstate = st
  end
  return st
end

-- ws_dsync brings the keys to the script's instant; it answers nothing.
local function ws_dsync(L, K)
  if K.synced then return end
  K.synced = true
  local want = ws_dstate(L)
  local st = redis.call('HGET', K.h, 's')
  if st == want then return end
  local thr = L.now - L.w
  local old = nil
  if st then old = tonumber(string.match(st, '^(%-?%d+):')) end
  if old ~= L.cstart then
    -- The current bucket changed: keep the old one in D unless it has left
    -- the window, and take the new one out of D if it is there (a view at
    -- another instant may have put it there).
    if old ~= nil and old > thr then
      local v = redis.call('GET', K.c)
      if v then redis.call('HSET', K.h, string.format('%d', old), v) end
    end
    local f = string.format('%d', L.cstart)
    local v = redis.call('HGET', K.h, f)
    if v then
      redis.call('SET', K.c, v)
      redis.call('HDEL', K.h, f)
    else
      redis.call('DEL', K.c)
      redis.call('PFADD', K.c)
    end
  end
  -- Rebuild the union from the live buckets; delete those that have left.
  redis.call('DEL', K.u)
  local all = redis.call('HGETALL', K.h)
  local gone = {}
  for i = 1, #all, 2 do
    local s = tonumber(all[i])
    if s ~= nil then
      if s <= thr then
        gone[#gone + 1] = all[i]
      elseif s <= L.now + L.H.F then
        redis.call('SET', K.t, all[i + 1])
        redis.call('PFMERGE', K.u, K.t)
      end
    end
  end
  redis.call('PFMERGE', K.u, K.c)
  redis.call('DEL', K.t)
  if #gone > 0 then ws_chunks(gone, function(...) redis.call('HDEL', K.h, ...) end) end
  redis.call('HSET', K.h, 's', want)
  local at = ws_expiry(L.H, L.cstart + L.w)
  redis.call('PEXPIREAT', K.h, at)
  redis.call('PEXPIREAT', K.c, at)
  redis.call('PEXPIREAT', K.u, at)
end

-- ws_dadd adds members to bucket B (the current one, or a live earlier one
-- for a late event) and to the union.
local function ws_dadd(L, K, B, members)
  ws_dsync(L, K)
  if B.start == L.cstart then
    redis.call('PFADD', K.c, unpack(members))
  else
    local f = string.format('%d', B.start)
    local v = redis.call('HGET', K.h, f)
    if v then redis.call('SET', K.t, v) end
    redis.call('PFADD', K.t, unpack(members))
    redis.call('HSET', K.h, f, redis.call('GET', K.t))
    redis.call('DEL', K.t)
  end
  redis.call('PFADD', K.u, unpack(members))
end

-- ws_dcount is the number of distinct members in the buckets that start
-- after lthr. When the keys are at the script's instant and the span is the
-- window, it is PFCOUNT of the union; otherwise (a shorter span, or no add
-- has brought the keys to this instant yet) a union built in scratch, so
-- that a count writes nothing.
local function ws_dcount(L, K, lthr)
  local want = ws_dstate(L)
  local st = want
  if not K.synced then st = redis.call('HGET', K.h, 's') end
  if st == want and lthr <= L.now - L.w then return redis.call('PFCOUNT', K.u) end
  local hi = L.now + L.H.F
  redis.call('DEL', K.t)
  local all = redis.call('HGETALL', K.h)
  for i = 1, #all, 2 do
    local s = tonumber(all[i])
    if s ~= nil and s > lthr and s > L.now - L.w and s <= hi then
      redis.call('SET', K.s, all[i + 1])
      redis.call('PFMERGE', K.t, K.s)
    end
  end
  local cur = nil
  if st then cur = tonumber(string.match(st, '^(%-?%d+):')) end
  if cur ~= nil and cur > lthr and cur > L.now - L.w and cur <= hi then redis.call('PFMERGE', K.t, K.c) end
  local n = redis.call('PFCOUNT', K.t)
  redis.call('DEL', K.t, K.s)
  return n
end
