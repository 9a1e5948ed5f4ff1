-- Distinct counts: a HyperLogLog per bucket, kept in a ring of keys, and the
-- union of the live buckets, so that a count is PFCOUNT of one key. Every key
-- is declared in KEYS by the caller, in the counter's slot:
--
--   D       a hash: "<bucket start>" -> its ring index; "u", the oldest live
--           bucket start D:u was built for; "h", the newest bucket start
--   D:u     the union of the buckets from "u" on
--   D:r0 .. D:r<R-1>  one HyperLogLog per bucket (ws_dk: the window's
--           buckets, the new one, one ahead, and the future tolerance's)
--
-- An add to a bucket that has its ring key, while D:u is current, is PFADD to
-- that key and to D:u, and its count PFCOUNT D:u. The first add to a bucket
-- gives it the lowest ring index no live bucket holds; when the oldest live
-- bucket has changed, the second add at that instant rebuilds D:u (PFMERGE),
-- and until then a count merges the live ring keys. Ring keys expire with
-- their bucket, D and D:u with the newest. D's fields are bucket starts, so
-- that a view at another instant (Store.At) tells a bucket that left from one
-- ahead; when every ring key is held (At views far apart in time), the
-- bucket furthest ahead gives its key up. An add is planned (ws_dplan: reads
-- only; D of another type fails the event before anything is written), then
-- written (ws_dwrite), before the event's other writes: only a string that is
-- not a HyperLogLog, at a ring or union key, could fail a write.

-- ws_dk returns the keys of a distinct count from KEYS[k], {h = D, u = D:u,
-- r = index of D:r0, n = R}, with what the call learns of D (ub, top, by:
-- D read whole, known), and where the next item's keys start. R, kept in
-- the shape, is n + 3 for a window of n buckets, and one more per bucket of
-- the future tolerance (at most n).
local function ws_dk(L, k)
  local n, F = L.ring, L.H.F
  if L.ringF ~= F then
    n = math.ceil(L.w / L.b)
    n = n + 3 + math.min(math.ceil(F / L.b), n)
    L.ring, L.ringF = n, F
  end
  return {h = KEYS[k], u = KEYS[k + 1], r = k + 2, n = n, ub = nil, top = nil, by = nil, known = false}, k + 2 + n
end

-- ws_dlive reads D whole into K.by: the ring index of each bucket, by start.
local function ws_dlive(K)
  if K.by ~= nil then return K.by end
  local all = redis.call('HGETALL', K.h)
  local by = {}
  for i = 1, #all, 2 do
    local s, j = tonumber(all[i]), tonumber(all[i + 1]) -- ("u" and "h" are not numbers)
    if s ~= nil and j ~= nil then by[s] = j end
  end
  K.by = by
  return by
end

-- ws_dkeys lists the ring keys of the buckets that start in (lthr, top].
local function ws_dkeys(K, by, lthr, top)
  local keys = {}
  for s, j in pairs(by) do
    if s > lthr and s <= top and j < K.n then keys[#keys + 1] = KEYS[K.r + j] end
  end
  return keys
end

-- ws_dplan plans an add to bucket B (the current one, or a live earlier one
-- for a late event): the ring index, whether the bucket takes a new one
-- (and what then leaves D), and what the union needs. Reads only.
local function ws_dplan(L, K, B)
  local st = redis.call('HMGET', K.h, 'u', 'h', string.format('%d', B.start))
  K.ub, K.top, K.known = tonumber(st[1]), tonumber(st[2]), true
  local P = {idx = tonumber(st[3]), alloc = false, gone = nil, top = nil, stale = false, union = nil}
  if P.idx == nil or P.idx >= K.n then
    -- A new ring key: the lowest index no live bucket holds; the buckets
    -- that left the window give theirs up.
    local by = ws_dlive(K)
    local thr, used, gone, top = L.now - L.w, {}, {}, B.start
    for s, j in pairs(by) do
      if s <= thr or j >= K.n then gone[#gone + 1] = s else used[j] = s end
    end
    P.idx = nil
    for j = 0, K.n - 1 do
      if used[j] == nil then
        P.idx = j
        break
      end
    end
    if P.idx == nil then
      -- Every key is held: the bucket furthest ahead gives its key up.
      local far = nil
      for s, j in pairs(by) do
        if j < K.n and s > thr and (far == nil or s > far) then far = s end
      end
      P.idx, P.stale = by[far], true
      gone[#gone + 1] = far
    end
    for s, j in pairs(by) do
      if s > top and j < K.n and s > thr and not (P.stale and s == gone[#gone]) then top = s end
    end
    P.alloc, P.gone, P.top = true, gone, top
  end
  if K.ub ~= L.low and not P.alloc then
    P.union = 'rebuild' -- the second add at this instant: B's key is in the union
  elseif K.ub ~= nil and B.start >= K.ub and not P.stale then
    P.union = 'add' -- D:u holds every bucket from ub on, whatever instant it was built for
  end
  return P
end

-- ws_pfadd is PFADD of members to key, in slices small enough to unpack; it
-- answers whether the key changed.
local function ws_pfadd(key, members)
  if #members <= 1000 then return redis.call('PFADD', key, unpack(members)) == 1 end
  local changed = false
  ws_chunks(members, function(...)
    if redis.call('PFADD', key, ...) == 1 then changed = true end
  end)
  return changed
end

-- ws_dwrite adds members to bucket B as ws_dplan planned it.
local function ws_dwrite(L, K, B, P, members)
  local rk, at = KEYS[K.r + P.idx], nil
  if P.alloc then
    redis.call('DEL', rk)
    local by = K.by
    local gone = {}
    for x, s in ipairs(P.gone) do by[s], gone[x] = nil, string.format('%d', s) end
    by[B.start] = P.idx
    K.top = P.top
    if #gone > 0 then ws_chunks(gone, function(...) redis.call('HDEL', K.h, ...) end) end
    at = ws_expiry(L.H, P.top + L.w)
    if P.stale then
      K.ub = nil
      redis.call('HSET', K.h, string.format('%d', B.start), P.idx, 'h', string.format('%d', P.top), 'u', '')
    else
      redis.call('HSET', K.h, string.format('%d', B.start), P.idx, 'h', string.format('%d', P.top))
    end
    redis.call('PEXPIREAT', K.h, at)
  end
  local changed = ws_pfadd(rk, members)
  if at ~= nil then redis.call('PEXPIREAT', rk, ws_expiry(L.H, B.start + L.w)) end
  if P.union == 'rebuild' then
    redis.call('DEL', K.u)
    ws_chunks(ws_dkeys(K, ws_dlive(K), L.now - L.w, math.huge), function(...) redis.call('PFMERGE', K.u, ...) end)
    redis.call('HSET', K.h, 'u', string.format('%d', L.low))
    redis.call('PEXPIREAT', K.u, ws_expiry(L.H, K.top + L.w))
    K.ub = L.low
  elseif P.union == 'add' then
    if changed then ws_pfadd(K.u, members) end
    if at ~= nil then redis.call('PEXPIREAT', K.u, at) end
  end
end

-- ws_dcount is the number of distinct members of the live buckets that start
-- after lthr: PFCOUNT of D:u when it is current and the span is the window
-- (its count is kept in it by the write that changed it: a read writes
-- nothing); else of the live ring keys (a merge, which writes nothing).
local function ws_dcount(L, K, lthr)
  local hi = L.now + L.H.F
  if not K.known then
    local v = redis.call('HMGET', K.h, 'u', 'h')
    K.ub, K.top, K.known = tonumber(v[1]), tonumber(v[2]), true
  end
  if K.top == nil then return 0 end -- nothing was ever added
  if K.ub == L.low and K.top <= hi and lthr <= L.now - L.w then return redis.call('PFCOUNT', K.u) end
  local keys = ws_dkeys(K, ws_dlive(K), math.max(lthr, L.now - L.w), hi)
  if #keys == 0 then return 0 end
  -- (PFCOUNT of one key keeps the count in it, a write; of several, a merge,
  -- writes nothing: one key is counted as two of the same, so that a read
  -- leaves every key as it was.)
  if #keys == 1 then return redis.call('PFCOUNT', keys[1], keys[1]) end
  return redis.call('PFCOUNT', unpack(keys))
end
