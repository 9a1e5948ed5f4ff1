-- Several sliding windows of one key, kept as prefix sums g and S, a window's
-- sum g less its mark's S (limit.NewWindows's doc, with an example); S's
-- fields, in each window's hash, are named by the bucket's index (ms / bucket).
--
-- KEYS: per operation, one hash per window, in the rules' order; the first
-- also holds the state: g; t, the time of the newest counted cost; m<k>,
-- v<k>, window k's mark (its oldest bucket that may hold a count) and S
-- there. Fields below a mark are deleted. The keys expire together at X(t) =
-- (floor(need / Q) + 2) x Q, need being when t's buckets have left every
-- window, Q a quarter of the longest.
--
-- ARGV: clock ("" for the server's TIME), Q ms, the number of windows, then
-- per window: bucket ms, buckets, limit, mark field, value field; then one
-- cost per operation (each atomic and answered on its own). Reply, per
-- operation: {allowed, now, t, each window's sum after the decision, then,
-- when refused, each window's wait until the cost fits in it alone (-1:
-- never)}, or its error. Costs and limits are at most 2^51, so every figure
-- is an integer below 2^53 (g is rebased before it would pass 2^52). A clock
-- behind t is taken as t; a refusal, and a cost of 0, write nothing.

local clock, srv = ws_clock(ARGV[1])
local Q, K = tonumber(ARGV[2]), tonumber(ARGV[3])
local floor = math.floor
local b, nb, lim, meta = {}, {}, {}, {'g', 't'}
for k = 1, K do
  local a = 5 * k - 1
  b[k], nb[k], lim[k] = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  meta[2 * k + 1], meta[2 * k + 2] = ARGV[a + 3], ARGV[a + 4]
end
local first = 5 * K + 4 -- the first operation's cost
local spec = 2 * K + 3 -- where the state's read has the first window's oldest live bucket

-- ws_wnames lists the bucket indexes from lo to hi, as field names.
local function ws_wnames(lo, hi)
  local names = {}
  for j = lo, hi do names[j - lo + 1] = j end
  return names
end

-- ws_wfirst: the first bucket of hash key from index lo to hi that counted
-- something, and its S (nil: none), read 4 fields at first, then twice as
-- many each time, up to 256.
local function ws_wfirst(key, lo, hi)
  local n = 4
  while lo <= hi do
    local top = math.min(hi, lo + n - 1)
    local vs = redis.call('HMGET', key, unpack(ws_wnames(lo, top)))
    for j = lo, top do
      local v = vs[j - lo + 1]
      if v then return j, tonumber(v) end
    end
    lo, n = top + 1, math.min(2 * n, 256)
  end
  return nil
end

-- ws_wretry: the time from now until window k's sum (g less S at mark) is at
-- most rem (its hash key, its newest bucket that counted last): once bucket j
-- has left, the sum is g less the next counted bucket's S.
local function ws_wretry(key, k, g, mark, last, rem, now)
  local prev, lo, n = mark, mark + 1, 8
  while lo <= last do
    local top = math.min(last, lo + n - 1)
    local vs = redis.call('HMGET', key, unpack(ws_wnames(lo, top)))
    for j = lo, top do
      local v = vs[j - lo + 1]
      if v then
        if g - tonumber(v) <= rem then return (prev + nb[k]) * b[k] - now end
        prev = j
      end
    end
    lo, n = top + 1, math.min(2 * n, 256)
  end
  return (prev + nb[k]) * b[k] - now
end

-- ws_wdrop deletes the fields of hash key from index lo to index hi (lo <=
-- hi), a thousand at a time (a window may have 10,000 buckets).
local function ws_wdrop(key, lo, hi)
  if hi - lo < 1000 then
    redis.call('HDEL', key, unpack(ws_wnames(lo, hi)))
  else
    ws_chunks(ws_wnames(lo, hi), function(...) redis.call('HDEL', key, ...) end)
  end
end

-- ws_wexpiry is X(at): when a key whose newest count is at expires.
local function ws_wexpiry(at)
  local need = 0
  for k = 1, K do
    local n = (floor(at / b[k]) + nb[k]) * b[k]
    if n > need then need = n end
  end
  return (floor(need / Q) + 2) * Q
end

-- Each operation's windows (reused): current bucket, the newest count's, mark
-- and S, whether it moved, the fields it passed (lo > hi: none), whether the
-- cost fits.
local cur, last, mark, val, moved, dlo, dhi, own = {}, {}, {}, {}, {}, {}, {}, {}

-- Once per call: each window's current bucket (c0) and the first window's
-- oldest live bucket (s1), the clock and s1 as field values.
local c0 = {}
for k = 1, K do c0[k] = floor(clock / b[k]) end
local s1 = c0[1] - nb[1] + 1
local clocks = string.format('%d', clock)
meta[spec] = string.format('%d', s1)

-- ws_wop is one operation: a cost for the key whose hashes are KEYS[o + 1]
-- to KEYS[o + K].
local function ws_wop(o, cost)
  local now = clock
  local key1 = KEYS[o + 1]
  -- The first window's oldest live bucket (s1) is read with the state: a
  -- mark that moves one bucket on finds its S there (clamped below, the
  -- read is of a bucket at most as old, and only taken when it is the mark's).
  local r = redis.call('HMGET', key1, unpack(meta))
  local g, t = tonumber(r[1]), tonumber(r[2])
  local fresh = r[1] == false
  if fresh then
    g = 0
  elseif not (g and t) then
    ws_err('WRONGTYPE', 'the key does not hold a windows limiter state')
  elseif now < t then
    now = t
  end

  -- Each window's current bucket, mark and sum. A mark whose bucket left
  -- moves to the oldest bucket still in that counted something, or, when
  -- none did, to the current bucket with S = g (the window's sum is 0); the
  -- fields it passed are dead (deleted if the call writes).
  local ok, quiet = true, not fresh -- quiet: no mark moves, no bucket starts
  local late = now ~= clock
  for k = 1, K do
    local ck = late and floor(now / b[k]) or c0[k]
    local sk = ck - nb[k] + 1
    cur[k], moved[k], dlo[k], dhi[k] = ck, false, 1, 0
    local mk, vk
    if fresh then
      mk, vk = ck, 0
    else
      local lk = floor(t / b[k])
      last[k] = lk
      if lk < ck then quiet = false end
      mk, vk = tonumber(r[2 * k + 1]), tonumber(r[2 * k + 2])
      if mk == nil or vk == nil then ws_err('WRONGTYPE', 'the key does not hold a windows limiter state') end
      if mk < sk then
        -- The fields it passed: none lies before lk's window (the write at
        -- t deleted them), so a mark far behind (a state written by hand)
        -- costs at most a window of names, never a walk from it.
        dlo[k], dhi[k], moved[k], quiet = math.max(mk, lk - nb[k] + 1), math.min(sk - 1, lk), true, false
        local j, v
        if k == 1 and sk == s1 and r[spec] then
          j, v = sk, tonumber(r[spec])
        elseif lk >= sk then
          j, v = ws_wfirst(KEYS[o + k], sk, lk)
        end
        if j then mk, vk = j, v else mk, vk = ck, g end
      end
    end
    mark[k], val[k] = mk, vk
    local fits = cost <= lim[k] and g - vk <= lim[k] - cost
    own[k] = fits
    ok = ok and fits
  end

  local tv = late and now or clocks -- the time a write keeps
  if ok and cost > 0 and quiet and g + cost <= 4503599627370496 then
    -- The usual write: the running total and the time, nothing else.
    redis.call('HSET', key1, 'g', g + cost, 't', tv)
  elseif ok and cost > 0 then
    local put = fresh
    if fresh then
      for k = 2, K do redis.call('DEL', KEYS[o + k]) end -- a window's hash that outlived the state
    elseif g + cost > 4503599627370496 then
      -- Rebase: every S, and g, less the smallest mark's S. g less it is the
      -- largest window sum, at most 2^51, so g + cost stays below 2^52.
      local base = val[1]
      for k = 2, K do base = math.min(base, val[k]) end
      for k = 1, K do
        local key = KEYS[o + k]
        if dlo[k] <= dhi[k] then ws_wdrop(key, dlo[k], dhi[k]) end
        dlo[k], dhi[k] = 1, 0
        local h, out = redis.call('HGETALL', key), {}
        for i = 1, #h, 2 do
          if string.find(h[i], '^%-?%d+$') then out[#out + 1], out[#out + 2] = h[i], tonumber(h[i + 1]) - base end
        end
        ws_chunks(out, function(...) redis.call('HSET', key, ...) end)
        val[k] = val[k] - base
      end
      g, put = g - base, true
    end
    local h1, n, born, starts = {'g', g + cost, 't', tv}, 4, nil, fresh
    for k = 1, K do
      local key = KEYS[o + k]
      if dlo[k] <= dhi[k] then
        if k > 1 and last[k] <= cur[k] - nb[k] then
          -- Every bucket of the window has left (the key was idle): the
          -- hash, which holds nothing else, goes whole, not a name at a time.
          redis.call('DEL', key)
        else
          ws_wdrop(key, dlo[k], dhi[k])
        end
      end
      if fresh or last[k] < cur[k] then -- the event starts a bucket: its S is g
        starts = true
        if k == 1 then
          h1[n + 1], h1[n + 2], n = cur[k], g, n + 2
        else
          redis.call('HSET', key, cur[k], g)
          -- A window with nothing left in it may have lost its hash: the
          -- new one needs the expiry.
          if not fresh and last[k] <= cur[k] - nb[k] then
            born = born or {}
            born[#born + 1] = key
          end
        end
      end
      if put or moved[k] then
        h1[n + 1], h1[n + 2], h1[n + 3], h1[n + 4], n = meta[2 * k + 1], mark[k], meta[2 * k + 2], val[k], n + 4
      end
    end
    redis.call('HSET', key1, unpack(h1))
    -- X moves only when a bucket starts.
    local x = starts and ws_wexpiry(now)
    if x and (fresh or x > ws_wexpiry(t)) then
      born = {}
      for k = 1, K do born[k] = KEYS[o + k] end
    end
    if born then
      if srv == nil then srv = ws_srvnow() end
      for _, key in ipairs(born) do redis.call('PEXPIREAT', key, srv + x - clock) end
    end
  end

  -- The reply: {allowed, now, the newest count's time, then each window's
  -- sum; and each window's retry when refused}.
  local out, tl = {ok and 1 or 0, now, t or 0}, t
  if ok and cost > 0 then tl = now end
  out[3] = tl or 0
  for k = 1, K do
    local sum = g - val[k]
    if ok then sum = sum + cost end
    out[3 + k] = sum
    if not ok then
      local rt = 0
      if not own[k] then
        if cost > lim[k] then rt = -1 else rt = ws_wretry(KEYS[o + k], k, g, mark[k], last[k], lim[k] - cost, now) end
      end
      out[3 + K + k] = rt
    end
  end
  return out
end

local res = {}
for i = 1, #ARGV - first + 1 do res[i] = ws_result(pcall(ws_wop, (i - 1) * K, tonumber(ARGV[first + i - 1]))) end
return res
