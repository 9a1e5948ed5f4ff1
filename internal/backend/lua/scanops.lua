-- The counter operations of a backend whose buckets expire on their own
-- (field TTL, TairHash): every operation reads the counter whole (ws_read),
-- and writes with the backend's ws_incr, ws_get and ws_drop. A counter is one
-- key, and a call keeps nothing between operations. The operations, which
-- event.lua runs in stages (open, prepare, commit), are:
--
--   ws_open(L, key, B) -> C          read the counter for a write to bucket B:
--                                    C.sum (as ws_num leaves it), C.fits
--                                    (within int64); writes nothing
--   ws_prepare(L, C, delta, B)       check that adding delta (a decimal
--                                    string) keeps the sum and the bucket
--                                    within int64 (WS_E_OVERFLOW otherwise);
--                                    writes nothing
--   ws_commit(L, key, C, B) -> sum, v  write what ws_prepare checked
--   ws_quiet(L, key, delta, B) -> Q  ws_open and ws_prepare of a write that
--                                    answers no sum: it reads the bucket alone
--                                    (and the counter whole once per bucket, so
--                                    that a hash that is not a counter is
--                                    refused); ws_quietcommit(L, key, Q, B)
--   ws_detail(L, key, C) -> S        the live buckets (ws_scan with keep)
--   ws_sumover(L, key, lb)           the read-only sum over a lookback

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

-- No fast path: every operation reads the counter whole, the pipeline's way.
local ws_fast = nil
