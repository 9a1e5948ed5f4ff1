-- The scan-based operations: the backend answers every operation from a
-- full read of the counter (ws_read), and writes with its ws_incr, ws_get and
-- ws_drop. A backend whose buckets expire on their own (field TTL, TairHash)
-- takes these as its Ops (backend.ScanOps).
--
-- A counter's state C holds its window sum (C.sum, as ws_num leaves it) and
-- what the read saw.

-- A counter is one key (KEYS takes WS_KPC entries per counter), and a call
-- keeps nothing between operations: ws_begin, ws_end and ws_abort (see
-- package backend's doc) do nothing, ws_meta has nothing to show, and a
-- counter's life (ws_life) is its key's.
local WS_KPC = 1
local function ws_ckey(k, j) return KEYS[k + j] end
local function ws_begin() end
local function ws_end() end
local function ws_abort() end
local function ws_meta() return {} end
local function ws_life(key) return redis.call('PTTL', key) end

local function ws_scanopen(L, key, B)
  local all = ws_read(key)
  local S = ws_scan(L, all, L.now - L.w, false)
  local sum, fits = ws_scansum(L, all, S, L.now - L.w)
  return {sum = sum, fits = fits, S = S, all = all}
end

-- ws_scanput adds delta (a decimal string) to bucket B, once ws_scanopen has
-- read the counter, and deletes the stale fields it saw. It returns the new
-- window sum and the bucket's new value (a double). It writes nothing when
-- the window sum or the bucket would leave int64.
local function ws_scanput(L, key, C, delta, B)
  local sum = ws_addsum(C.sum, delta)
  local v = ws_incr(L, key, B, delta)
  if #C.S.stale > 0 then ws_drop(key, C.S.stale) end
  return sum, v
end

-- ws_scanprepare checks, before a group writes anything, that adding delta to
-- bucket B leaves the window sum and the bucket within int64 (it raises
-- WS_E_OVERFLOW otherwise); ws_scancommit then writes, and cannot fail on
-- the numbers. (ws_scanput alone needs no bucket check: its HINCRBY is its
-- first write, and refuses an overflow itself.)
local function ws_scanprepare(L, C, delta, B)
  C.nsum, C.delta = ws_addsum(C.sum, delta), delta
  local all, cur = C.all, '0'
  for i = 1, #all, 2 do
    if all[i] == B.field then cur = all[i + 1] end
  end
  ws_bucketplus(cur, delta)
end

local function ws_scancommit(L, key, C, B)
  local v = ws_incr(L, key, B, C.delta)
  if #C.S.stale > 0 then ws_drop(key, C.S.stale) end
  return C.nsum, v
end

-- ws_scanquiet prepares a write that answers no sum (AddNoSum, and a group's
-- WS_IT_QUIET): it reads the bucket alone (ws_get) to check that adding delta
-- keeps it within int64, and returns what ws_scanquietcommit writes. When
-- the bucket is new (once per bucket) it reads the whole counter too, so that
-- a hash that is not a counter is refused (WS_E_NOTCOUNTER) before the write
-- gives it a field and an expiry.
local function ws_scanquiet(L, key, delta, B)
  local cur = ws_get(key, B.field)
  if not cur then
    ws_scan(L, ws_read(key), L.now - L.w, false)
    cur = '0'
  end
  ws_bucketplus(cur, delta)
  return {delta = delta}
end

local function ws_scanquietcommit(L, key, Q, B)
  ws_incr(L, key, B, Q.delta)
end

-- ws_scandetail lists the live buckets for retry-after and reset-after, from
-- what ws_scanopen read (C), or from a new read (C nil: after a write).
local function ws_scandetail(L, key, C)
  local all = C and C.all or ws_read(key)
  return ws_scan(L, all, L.now - L.w, true)
end

local function ws_scanaddnosum(L, key, delta, B)
  ws_scanquietcommit(L, key, ws_scanquiet(L, key, delta, B), B)
  return 1
end

-- ws_fastopen (see ops.lua): no fast path here, the current bucket's state.
local function ws_scanfastopen(L, key)
  return nil, nil, nil, ws_scanopen(L, key, L.target)
end

-- ws_peek (see ops.lua): none; every operation here reads the counter
-- whole, so a refusal's retry and reset come from that read.
local function ws_scanpeek() return nil end
local function ws_scanpeekreach() return -math.huge end

-- The names ops.lua and group.lua call, bound to these.
local ws_open, ws_put, ws_prepare, ws_commit, ws_detail, ws_addnosum, ws_sumover =
  ws_scanopen, ws_scanput, ws_scanprepare, ws_scancommit, ws_scandetail, ws_scanaddnosum, ws_scanread
local ws_quiet, ws_quietcommit = ws_scanquiet, ws_scanquietcommit
local ws_fastopen, ws_fastcommit, ws_peek, ws_peekreach = ws_scanfastopen, nil, ws_scanpeek, ws_scanpeekreach

-- ws_headlimits, ws_headmoves, ws_leanone and ws_leanlink (see ops.lua): no
-- fast path for limits that share a head, nor a lean one for Add and Allow
-- or for a link.
local ws_headlimits, ws_headmoves, ws_leanone, ws_leanlink = nil, nil, nil, nil
