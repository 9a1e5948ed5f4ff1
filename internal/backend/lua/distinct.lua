-- Distinct counts: a HyperLogLog per bucket, kept in a ring of keys, and the
-- union of the live buckets, kept so that a count is PFCOUNT of one key,
-- whose cached cardinality Redis reuses until the key changes. Every key is
-- declared in KEYS by the caller (a key a script names itself may have moved
-- away during a slot migration), all in the counter's slot:
--
--   D       a hash: which bucket each ring key holds ("<bucket start>" ->
--           ring index), "u", the oldest live bucket start D:u was built
--           for, and "h", the newest bucket start that holds a ring key
--   D:u     the union of the buckets from "u" on
--   D:r0 .. D:r<R-1>
--           the ring: one HyperLogLog per bucket, R keys for a window of n
--           buckets (ws_dring): the live buckets (n, one more at a year's
--           short last bucket), the new one, one ahead, and the buckets of
--           the future tolerance (clients whose clocks are ahead)
--
--   D (ring of R = 6, window of 3 buckets), at 12:00:03.5, buckets of 1 s:
--   "12:00:01" -> 4   "12:00:02" -> 5   "12:00:03" -> 0   u = 12:00:01
--   D:r4 {a}   D:r5 {a, b}   D:r0 {c}   D:u {a, b, c}
--
-- An add to a bucket that has its ring key is PFADD to that key and to D:u
-- (skipped when the bucket's key did not change: the union did not either),
-- and its count PFCOUNT D:u: four commands whatever the window's length.
-- Once per bucket (a new bucket, or the oldest live one leaving), the first
-- add reads D whole (ws_dslow): it gives the new bucket the lowest ring
-- index no bucket still in the window holds (deleting the key of the one
-- that left), and rebuilds D:u with one PFMERGE of the live ring keys. A
-- count alone never writes: when D:u is not at its instant (no add has
-- been made there yet), or over a span shorter than the window, it is
-- PFCOUNT of the live ring keys, which merges them. Ring keys expire when
-- their bucket leaves the window, D and D:u when the newest bucket does.
--
-- D's fields are bucket starts, not year-stripped codes, so that a view at
-- another instant (Store.At) can always tell a bucket that has left the
-- window from one ahead of its instant. Only buckets that have left the
-- window at the script's instant are ever deleted, unless every ring key is
-- held (views at instants further apart than the future tolerance both
-- wrote ahead): then the bucket furthest ahead gives up its key.

-- ws_dring is the number of ring keys of a window shape: n + 3 for a window
-- of n buckets, and one more per bucket of the future tolerance (at most n),
-- for the buckets that clients whose clocks are ahead write.
local function ws_dring(L)
  local n = math.ceil(L.w / L.b)
  return n + 3 + math.min(math.ceil(L.H.F / L.b), n)
end

-- ws_dk returns the keys of a distinct count whose first key is KEYS[k], as
-- {h = D, u = D:u, r = index of D:r0 in KEYS, n = R}, and where the next
-- item's keys start. (st: D's "u", "h" and bucket fields as read by this call.)
local function ws_dk(L, k)
  local n = ws_dring(L)
  return {h = KEYS[k], u = KEYS[k + 1], r = k + 2, n = n, st = nil}, k + 2 + n
end

-- ws_dlive reads D whole: the ring index of each bucket (by start), and
-- "u" and "h".
local function ws_dlive(K)
  local all = redis.call('HGETALL', K.h)
  local by, u, h = {}, nil, nil
  for i = 1, #all, 2 do
    local f = all[i]
    if f == 'u' then
      u = tonumber(all[i + 1])
    elseif f == 'h' then
      h = tonumber(all[i + 1])
    else
      local s, j = tonumber(f), tonumber(all[i + 1])
      if s ~= nil and j ~= nil then by[s] = j end
    end
  end
  return by, u, h
end

-- ws_dkeys lists the ring keys of the buckets that start in (lthr, top].
local function ws_dkeys(K, by, lthr, top)
  local keys = {}
  for s, j in pairs(by) do
    if s > lthr and s <= top and j < K.n then keys[#keys + 1] = KEYS[K.r + j] end
  end
  return keys
end

-- ws_dslow gives bucket B a ring key, deletes what has left the window, and
-- rebuilds D:u when it is not at the script's instant; it answers B's ring
-- index.
local function ws_dslow(L, K, B)
  local by, u = ws_dlive(K)
  local thr = L.now - L.w
  local used, gone = {}, {}
  for s, j in pairs(by) do
    if s <= thr or j >= K.n then
      gone[#gone + 1] = string.format('%d', s) -- left the window (or a ring since shrunk)
      by[s] = nil
    else
      used[j] = s
    end
  end
  local rebuild, idx = u ~= L.low, by[B.start]
  if idx == nil then
    for j = 0, K.n - 1 do
      if used[j] == nil then
        idx = j
        break
      end
    end
    if idx == nil then
      -- Every key is held: the bucket furthest ahead gives its key up.
      local far = nil
      for s, _ in pairs(by) do
        if far == nil or s > far then far = s end
      end
      idx = by[far]
      by[far] = nil
      gone[#gone + 1] = string.format('%d', far)
      rebuild = true
    end
    redis.call('DEL', KEYS[K.r + idx])
    by[B.start] = idx
  end
  local h = B.start
  for s, _ in pairs(by) do
    if s > h then h = s end
  end
  if #gone > 0 then ws_chunks(gone, function(...) redis.call('HDEL', K.h, ...) end) end
  if rebuild then
    redis.call('DEL', K.u)
    local keys = ws_dkeys(K, by, thr, math.huge)
    ws_chunks(keys, function(...) redis.call('PFMERGE', K.u, ...) end)
  end
  local at = ws_expiry(L.H, h + L.w)
  redis.call('HSET', K.h, string.format('%d', B.start), idx, 'u', string.format('%d', L.low), 'h',
    string.format('%d', h))
  redis.call('PEXPIREAT', K.h, at)
  K.st = {L.low, h, idx}
  return idx, at
end

-- ws_dadd adds members to bucket B (the current one, or a live earlier one
-- for a late event) and to the union.
local function ws_dadd(L, K, B, members)
  local st = redis.call('HMGET', K.h, 'u', 'h', string.format('%d', B.start))
  local idx, at = tonumber(st[3]), nil
  if idx == nil or tonumber(st[1]) ~= L.low or idx >= K.n then
    idx, at = ws_dslow(L, K, B)
  else
    K.st = {L.low, tonumber(st[2]), idx}
  end
  local rk = KEYS[K.r + idx]
  if redis.call('PFADD', rk, unpack(members)) == 1 or at ~= nil then
    redis.call('PFADD', K.u, unpack(members))
    if at ~= nil then
      redis.call('PEXPIREAT', K.u, at)
      redis.call('PEXPIREAT', rk, ws_expiry(L.H, B.start + L.w))
    end
  end
end

-- ws_dcount is the number of distinct members in the buckets that start
-- after lthr and are live. It is PFCOUNT of D:u when D:u is at the script's
-- instant, nothing is ahead of the instant and the span is the window; else
-- PFCOUNT of the live ring keys (a merge, which writes nothing).
local function ws_dcount(L, K, lthr)
  local top = L.now + L.H.F
  local st = K.st
  if st == nil then
    local v = redis.call('HMGET', K.h, 'u', 'h')
    st = {tonumber(v[1]), tonumber(v[2])}
  end
  if st[2] == nil then return 0 end -- nothing was ever added
  if st[1] == L.low and st[2] <= top and lthr <= L.now - L.w then return redis.call('PFCOUNT', K.u) end
  local by = ws_dlive(K)
  local keys = ws_dkeys(K, by, math.max(lthr, L.now - L.w), top)
  if #keys == 0 then return 0 end
  return redis.call('PFCOUNT', unpack(keys))
end
