-- The counter operations of a backend whose buckets expire on their own
-- (field TTL, TairHash), on a full read of the counter (ws_read) and the
-- backend's ws_incr, ws_get and ws_drop; a counter is one key. The stages of
-- event.lua call: ws_open(L, key, B) -> C (C.sum, C.fits: within int64);
-- ws_prepare(L, C, delta, B), which raises WS_E.OVERFLOW before any write;
-- ws_commit(L, key, C, B) -> sum, v; ws_quiet and ws_quietcommit, a write
-- that answers no sum (the bucket read alone, the counter whole once per
-- bucket, to refuse a hash that is not a counter); ws_detail (the live
-- buckets); ws_sumover(L, key, lb), the read-only sum over a lookback.

local WS_KPC = 1
local function ws_ckey(k, j) return KEYS[k + j] end
local function ws_begin() end
local function ws_end() end
local function ws_abort() end
local function ws_meta() return {} end
local function ws_life(key) return redis.call('PTTL', key) end

local function ws_open(L, key, B)
  local all = ws_read(key)
  local S = ws_scan(L, all, L.now - L.w, false)
  local sum, fits = ws_scansum(L, all, S, L.now - L.w)
  return {sum = sum, fits = fits, S = S, all = all, nsum = nil, nv = nil, delta = nil}
end

local function ws_prepare(L, C, delta, B)
  C.nsum, C.delta = ws_addsum(C.sum, delta), delta
  local all, cur = C.all, '0'
  for i = 1, #all, 2 do
    if all[i] == B.field then cur = all[i + 1] end
  end
  C.nv = ws_bucketplus(cur, delta)
end

local function ws_commit(L, key, C, B)
  local v = ws_incr(L, key, B, C.delta)
  if #C.S.stale > 0 then ws_drop(key, C.S.stale) end
  return C.nsum, v
end

local function ws_quiet(L, key, delta, B)
  local cur = ws_get(key, B.field)
  if not cur then
    ws_scan(L, ws_read(key), L.now - L.w, false)
    cur = '0'
  end
  ws_bucketplus(cur, delta)
  return {delta = delta}
end

local function ws_quietcommit(L, key, Q, B) ws_incr(L, key, B, Q.delta) end

local function ws_detail(L, key, C)
  return ws_scan(L, (C and C.all) or ws_read(key), L.now - L.w, true)
end

local ws_sumover = ws_scanread
local ws_sumrun = nil

-- No fast path: every operation reads the counter whole, the pipeline's way.
local ws_fast = nil
