-- Groups: several counters of one Redis Cluster slot, written atomically in
-- one operation, with an optional event id and event time. Its items:
--
--   WS_IT_COUNT    shape delta          add delta; answer the window sum
--   WS_IT_QUIET    shape delta          add delta; answer 0 (AddNoSum)
--   WS_IT_LIMIT    shape limit cost     a limit: count cost only if every
--                                       limit of the group admits it; answer
--                                       {sum, retry ms, reset ms, refused}
--                                       (refused: 1 when this limit refused,
--                                       in a duplicate's first decision too)
--   WS_IT_IFOK     shape delta          add delta only if the limits admit
--                                       (the other tiers of a limited counter);
--                                       answer the window sum
--   WS_IT_DISTINCT shape n member...    add members to the bucket's
--                                       HyperLogLog (none: only read); answer
--                                       the distinct count (its keys: see
--                                       ws_dk in distinct.lua)
--   WS_IT_READ     shape                answer the window sum; write nothing
--   WS_IT_EXTREME  shape dir value      keep the bucket's greatest (dir
--                                       WS_X_MAX) or least value ('': the
--                                       event's time; see extreme.lua);
--                                       answer {1, extreme} ({1}: none;
--                                       WS_X_RECENT: {1, ms, value, ...}),
--                                       {0, ...} when not counted (late)
--   WS_IT_XREAD    shape dir            answer {1, extreme} ({1}: none);
--                                       write nothing
--   WS_IT_ACQUIRE, WS_IT_REFRESH, WS_IT_RELEASE   max ttl id
--                                       a lease (see lease.lua): an acquire
--                                       is a limit of the group; answer
--                                       {held, ok, retry ms, refused}
--
-- After the operation's code, ARGV holds: the number of items, the event id
-- ("" for none), the id's time to live (ms), the event time ("" for now), then
-- each item's kind, shape and arguments. KEYS holds the id key (with an id),
-- then one key per item.
--
-- The reply is {flags, retry ms, answer per item}: flags is 1 when the limits
-- admitted (or there are none), plus 2 when the event id was seen before. A
-- duplicate writes nothing, and answers the counters' state now and the first
-- call's decision: which limits refused it then (the id's value records
-- them), with their retry from now. An event time places the writes (not the
-- limits, which decide now, nor the other tiers of a limited counter): an
-- item whose bucket has already left its window counts nothing and answers
-- {its value now} (an array of one, where a counted item answers the value
-- itself), and when no item can count the event the operation fails with
-- WS_E_TOOOLD. An event beyond the future tolerance fails with WS_E_FUTURE.
-- Nothing is written before every check has passed. A refused group without
-- unconditional writes writes nothing, not even its id, so that a retry is
-- decided anew; otherwise the id is kept for its time to live, with the
-- decision.

-- ws_groupretry is the earliest wait after which every limit admits its cost,
-- if nothing else is counted; -1 when one never will. The sums change only
-- when a bucket leaves, so the moments worth trying are now and those. They
-- are walked once, in time order: each limit keeps its remaining sum as its
-- buckets leave (oldest first, ws_leaving), and the group counts how many
-- limits admit, since a sum may rise as well as fall (a negative bucket
-- leaving). That is O(T log T) for T live buckets in all, where trying every
-- moment on every limit from scratch was O(T^2). A sum is exact on doubles
-- when its limit's live values' magnitudes add up to less than 2^53, else on
-- pairs (see exact.lua). it.S is each limit's live buckets (ws_detail).
local function ws_groupretry(limits)
  -- When no live bucket is negative, a limit that admits keeps admitting as
  -- buckets leave: the group's retry is the latest of the limits' own
  -- (ws_retry, kept in it.own for the limit's answer).
  local mono, latest = true, 0
  for _, it in ipairs(limits) do
    if it.cost > it.limit then return -1 end
    local S = it.S
    for j = 1, S.live do
      if S.vals[j] < 0 then mono = false end
    end
  end
  if mono then
    for _, it in ipairs(limits) do
      if not it.fits then
        it.own = ws_retry(it.L, it.S, it.cost, it.limit)
        if it.own > latest then latest = it.own end
      end
    end
    return latest
  end
  local n, fit, taus, R = #limits, 0, {}, {}
  for q, it in ipairs(limits) do
    local L, S = it.L, it.S
    local r = {it = it, order = ws_leaving(S), next = 1, big = S.kmag >= WS_BIG, rem = 0, hi = 0, lo = 0,
      xh = 0, xl = 0, fits = false}
    for j = 1, S.live do
      taus[#taus + 1] = S.starts[j] + L.w - L.now
      if r.big then
        local h, l = ws_split(S.raw[j])
        r.hi, r.lo = r.hi + h, r.lo + l
      else
        r.rem = r.rem + S.vals[j]
      end
    end
    if r.big then
      r.xh, r.xl = ws_splitnum(it.limit - it.cost)
      r.fits = ws_sign(r.hi - r.xh, r.lo - r.xl) <= 0
    else
      r.fits = r.rem <= it.limit - it.cost
    end
    if r.fits then fit = fit + 1 end
    R[q] = r
  end
  if fit == n then return 0 end
  table.sort(taus)
  for _, tau in ipairs(taus) do
    for q = 1, n do
      local r = R[q]
      local it, order = r.it, r.order
      local L, S = it.L, it.S
      local moved = false
      while r.next <= #order and S.starts[order[r.next]] + L.w - L.now <= tau do
        local j = order[r.next]
        if r.big then
          local h, l = ws_split(S.raw[j])
          r.hi, r.lo = r.hi - h, r.lo - l
        else
          r.rem = r.rem - S.vals[j]
        end
        r.next, moved = r.next + 1, true
      end
      if moved then
        local f
        if r.big then f = ws_sign(r.hi - r.xh, r.lo - r.xl) <= 0 else f = r.rem <= it.limit - it.cost end
        if f ~= r.fits then
          r.fits = f
          if f then fit = fit + 1 else fit = fit - 1 end
        end
      end
    end
    if fit == n then return tau end
  end
  return -1
end

-- ws_refusedby marks the limits (and acquires) that refused an event the
-- first time, from the decision its id recorded ('0,j,k...': the items j, k
-- refused). A record without them ('0', from an older version) blames the
-- limits that refuse now, or every limit when none does.
local function ws_refusedby(items, limits, rec)
  if string.find(rec, ',L', 1, true) then return end -- refused by a linked group (ws_unreserve)
  local any = false
  for j in string.gmatch(rec, ',(%d+)') do
    local it = items[tonumber(j)]
    if it ~= nil and (it.kind == WS_IT_LIMIT or it.kind == WS_IT_ACQUIRE) then it.refused, any = true, true end
  end
  if any then return end
  for _, it in ipairs(limits) do
    if not it.fits then it.refused, any = true, true end
  end
  if any then return end
  for _, it in ipairs(limits) do it.refused = true end
end

local function ws_group(G)
  local items, limits, acquires, deciders = G.items, {}, {}, {}
  local seen = nil
  if G.idkey ~= nil then
    seen = redis.call('GET', G.idkey)
  end
  -- Place every write and open every counter: reads only.
  local placed = false
  for _, it in ipairs(items) do
    local kind = it.kind
    if it.lease then
      ws_lopen(it, G.H.now) -- a lease acts now, whatever the event time
      placed = true
      if kind == WS_IT_ACQUIRE then acquires[#acquires + 1] = it end
    elseif kind == WS_IT_LIMIT then
      it.B = it.L.target
      limits[#limits + 1] = it
    elseif kind == WS_IT_IFOK then
      it.B = it.L.target -- a limited counter's cost counts now, as the limits decide
    elseif kind == WS_IT_READ or kind == WS_IT_XREAD or (kind == WS_IT_DISTINCT and #it.members == 0) then
      it.B, it.read, placed = it.L.target, true, true
    else
      it.B = ws_target(it.L, G.e)
      if it.B ~= nil then placed = true end
    end
    if it.B ~= nil and it.C == nil and (kind == WS_IT_LIMIT or kind == WS_IT_COUNT or kind == WS_IT_IFOK) then
      it.C = ws_open(it.L, it.key, it.B) -- (ws_limits hands over its limits opened)
    end
  end
  if not placed and #limits == 0 then
    ws_err(WS_E_TOOOLD, 'the event time is before every window; nothing was written')
  end
  -- Decide.
  local allowed = true
  for _, it in ipairs(limits) do
    ws_checked(it.C.sum, it.C.fits)
    it.fits = it.cost <= it.limit and ws_le(it.C.sum, it.limit - it.cost)
    if not it.fits then allowed = false end
    deciders[#deciders + 1] = it
  end
  for _, it in ipairs(acquires) do
    if not it.fits then allowed = false end
    deciders[#deciders + 1] = it
  end
  local flags = 0
  if seen then
    -- The first call's decision: '1' (or '1@T', reserved at T: see
    -- ws_link), or '0' and the refusing items.
    allowed = string.byte(seen, 1) == 49
    flags = 2
    if not allowed then ws_refusedby(items, deciders, seen) end
  else
    for _, it in ipairs(deciders) do it.refused = not it.fits end
  end
  if allowed then flags = flags + 1 end
  local retry = 0
  if not allowed then
    for _, it in ipairs(limits) do it.S = ws_detail(it.L, it.key, it.C) end
    retry = ws_groupretry(limits)
    -- An acquire that does not fit now might once a lease ends: the group's
    -- retry is the later of the two (a release may free a lease sooner).
    for _, it in ipairs(acquires) do
      if it.refused then
        it.retry = ws_lretry(it, G.H.now)
        if it.retry < 0 or retry < 0 then retry = -1 else retry = math.max(retry, it.retry) end
      end
    end
  end
  -- Prepare every write, unless the event was seen before: an overflow
  -- raises here, before anything is written, so that no item is left written
  -- when another fails.
  if not seen then
    for _, it in ipairs(items) do
      local kind = it.kind
      if it.B == nil or it.read then
        it.d = nil
      elseif kind == WS_IT_LIMIT then
        if allowed and it.cost > 0 then it.d = it.delta end
      elseif kind == WS_IT_IFOK then
        if allowed and it.delta ~= '0' then it.d = it.delta end
      elseif kind == WS_IT_COUNT or kind == WS_IT_QUIET then
        it.d = it.delta
      elseif kind == WS_IT_EXTREME then
        it.X = ws_xprepare(it.L, it.key, it.dir, it.delta, G.e, it.B)
      end
      if it.d ~= nil then
        if kind == WS_IT_QUIET then
          it.Q = ws_quiet(it.L, it.key, it.d, it.B)
        else
          ws_prepare(it.L, it.C, it.d, it.B)
        end
      end
    end
  end
  -- Write: the HyperLogLogs first (a key of another type there fails before
  -- any counter is written), then the counters.
  local wrote = false
  if not seen then
    for _, it in ipairs(items) do
      if it.kind == WS_IT_DISTINCT and it.B ~= nil and not it.read then
        ws_dadd(it.L, it.K, it.B, it.members)
        wrote = true
      end
    end
  end
  local out = {flags, retry}
  for j, it in ipairs(items) do
    local kind, ans = it.kind, false
    if it.lease then
      ans = ws_lwrite(it, G.H, allowed, seen)
      if not seen and ans[2] == 1 then wrote = true end
    elseif it.B == nil then
      -- A late event whose bucket has left this item's window: it counts
      -- nothing here, and answers {value now} (the array marks "not
      -- counted"; the value is still the window's).
      if kind == WS_IT_DISTINCT then
        ans = {ws_dcount(it.L, it.K, it.L.now - it.L.w)}
      elseif kind == WS_IT_EXTREME then
        ans = ws_xans(0, ws_xget(it.L, it.key, it.dir))
      elseif kind == WS_IT_QUIET then
        ans = {0}
      else
        ans = {ws_sumover(it.L, it.key, it.L.w)}
      end
    elseif kind == WS_IT_READ then
      ans = ws_sumover(it.L, it.key, it.L.w)
    elseif kind == WS_IT_XREAD then
      ans = ws_xans(1, ws_xget(it.L, it.key, it.dir))
    elseif kind == WS_IT_EXTREME then
      if it.X ~= nil then
        ans, wrote = ws_xans(1, ws_xcommit(it.L, it.key, it.X, it.B)), true
      else
        ans = ws_xans(1, ws_xget(it.L, it.key, it.dir)) -- a duplicate: the extreme now
      end
    elseif kind == WS_IT_DISTINCT then
      ans = ws_dcount(it.L, it.K, it.L.now - it.L.w)
    elseif kind == WS_IT_LIMIT then
      local sum, reset = it.C.sum, nil
      if it.d ~= nil then
        local _, v = ws_commit(it.L, it.key, it.C, it.B)
        sum, wrote = it.C.nsum, true
        if v ~= 0 then reset = it.B.start + it.L.w - it.L.now end
      end
      local r = 0
      if it.refused then r = it.own or ws_retry(it.L, it.S, it.cost, it.limit) end
      if reset == nil then
        if it.d ~= nil then reset = ws_reset(it.L, ws_detail(it.L, it.key, nil))
        else reset = ws_reset(it.L, it.S or ws_detail(it.L, it.key, it.C)) end
      end
      ans = {sum, r, reset, it.refused and 1 or 0}
    elseif it.d == nil then
      if it.C ~= nil then ans = it.C.sum else ans = 0 end
    elseif kind == WS_IT_QUIET then
      ws_quietcommit(it.L, it.key, it.Q, it.B)
      wrote, ans = true, 0
    else
      ans = (ws_commit(it.L, it.key, it.C, it.B))
      wrote = true
    end
    out[j + 2] = ans
  end
  if G.idkey ~= nil and not seen and wrote then
    local rec = '1'
    if G.reserve then rec = '1@' .. string.format('%d', G.H.now) end
    if not allowed then
      rec = '0'
      for j, it in ipairs(items) do
        if it.refused then rec = rec .. ',' .. j end
      end
    end
    redis.call('SET', G.idkey, rec, 'PX', G.ttl)
  end
  return out
end

-- WS_W is how many slots of W (see ws_limits) a limit takes: its window L,
-- its state C, nt, nv and R from ws_fastopen, its limit (a number) and its
-- cost (the string ARGV has).
local WS_W = 7

-- ws_limitspeek answers a refused group of n limits (see ws_limits: W holds
-- each limit's L, C, its read R, its limit and cost) from peeks of its
-- counters (ws_peek),
-- when they settle every answer: each limit's own retry and reset, and the
-- group's retry. That is the earliest moment at which every limit admits,
-- found as ws_groupretry finds it, by walking the moments the peeked buckets
-- leave in time order, but only up to the horizon: the moment the last of a
-- limit's oldest peeked buckets leaves, after which a bucket it did not read
-- may leave (and, negative, make a limit refuse again). It answers nil when
-- a peek is missing or does not settle an answer (a cost above its limit
-- too: the group's retry is then -1, from the general path); the counters'
-- states are left in W for it. It reads nothing when a refusing limit's
-- oldest bucket leaves past another limit's reach (ws_peekreach), as when a
-- window of minutes refuses beside one of seconds: no limit can admit
-- before its oldest bucket leaves, so the walk could not get there.
local function ws_limitspeek(W, k, n)
  local first, reach = -math.huge, math.huge
  for j = 0, n - 1 do
    local L, C, w = W[WS_W * j + 1], W[WS_W * j + 2], WS_W * j
    local limit, cost = W[w + 6], tonumber(W[w + 7])
    reach = math.min(reach, ws_peekreach(L))
    if W[w + 3] == nil and not (cost <= limit and ws_le(C.sum, limit - cost)) then
      first = math.max(first, L.low + L.w - L.now)
    end
  end
  if first > reach then return nil end
  local out, R, taus, fit, horizon = {0, 0}, {}, {}, 0, math.huge
  for j = 0, n - 1 do
    local w = WS_W * j
    local L, key, limit, cost = W[w + 1], ws_ckey(k, j), W[w + 6], tonumber(W[w + 7])
    local C = W[w + 2] or ws_open(L, key, L.target, W[w + 5])
    W[w + 2] = C
    if cost > limit or type(C.sum) ~= 'number' then return nil end
    local fits, P = C.sum <= limit - cost, nil
    if fits then P = ws_peek(L, key, C) else P = ws_peek(L, key, C, cost, limit) end
    if P == nil then return nil end
    local reset, own = ws_peekreset(L, P), 0
    if not fits then own = ws_peekretry(L, P, C.sum, cost, limit) end
    if reset == nil or own == nil then return nil end
    out[j + 3] = {C.sum, own, reset, fits and 0 or 1}
    local r = {L = L, P = P, last = #P.vals, next = 1, rem = C.sum, x = limit - cost, fits = fits}
    if not P.whole then
      r.last = P.nold
      horizon = math.min(horizon, P.starts[P.nold] + L.w - L.now)
    end
    for m = 1, r.last do
      if P.raw[m] then taus[#taus + 1] = P.starts[m] + L.w - L.now end
    end
    if fits then fit = fit + 1 end
    R[j + 1] = r
  end
  table.sort(taus)
  for _, tau in ipairs(taus) do
    if tau > horizon then return nil end
    for q = 1, n do
      local r = R[q]
      local P, L, moved = r.P, r.L, false
      while r.next <= r.last and P.starts[r.next] + L.w - L.now <= tau do
        if P.raw[r.next] then r.rem, moved = r.rem - P.vals[r.next], true end
        r.next = r.next + 1
      end
      if moved and (r.rem <= r.x) ~= r.fits then
        r.fits = not r.fits
        if r.fits then fit = fit + 1 else fit = fit - 1 end
      end
    end
    if fit == n then
      out[2] = tau
      return out
    end
  end
  return nil
end

-- ws_limitcommit writes an admitted limit's cost to the current bucket and
-- answers the limit's item as ws_group does, {sum, 0, reset, 0}: from the
-- fast path's new total and bucket (nt, nv) and read R when ws_fastopen gave
-- them, else from the counter's state C (costs is the cost as ARGV has it).
local function ws_limitcommit(L, key, C, nt, nv, R, costs)
  local B = L.target
  if nt ~= nil then
    ws_fastcommit(L, key, nt, nv, R)
    return {nt, 0, B.start + L.w - L.now, 0}
  end
  local sum, reset = C.sum, nil
  if tonumber(costs) > 0 then
    local _, v = ws_commit(L, key, C, B)
    sum = C.nsum
    if v ~= 0 then
      reset = B.start + L.w - L.now
    else
      reset = ws_reset(L, ws_detail(L, key, nil))
    end
  else
    reset = ws_reset(L, ws_detail(L, key, C))
  end
  return {sum, 0, reset, 0}
end

-- ws_limitsend answers and writes a group of n limits opened into W (WS_W
-- slots per limit, see ws_limitspeek) by ws_limits or ws_wlimits, with
-- their counters' keys from KEYS[k] on; allowed says whether every limit
-- admits. A refusal, which writes nothing, is ws_group's (answered from
-- peeks when they settle it, ws_limitspeek): the counters opened are handed
-- over (those on the fast path as ws_open's state from their read). An
-- admission prepares every write (an overflow raises before any is made),
-- then makes them, as ws_group does.
local function ws_limitsend(H, W, k, n, allowed)
  if not allowed then
    local out = ws_limitspeek(W, k, n)
    if out ~= nil then return out end
    local G = {items = {}, H = H}
    for j = 0, n - 1 do
      local w = WS_W * j
      local L, key, costs = W[w + 1], ws_ckey(k, j), W[w + 7]
      G.items[j + 1] = {kind = WS_IT_LIMIT, L = L, key = key,
        limit = W[w + 6], cost = tonumber(costs), delta = costs, members = nil, K = nil,
        B = nil, C = W[w + 2] or ws_open(L, key, L.target, W[w + 5]), S = nil, Q = nil, d = nil, read = nil, fits = nil,
        refused = nil, own = nil}
    end
    return ws_group(G)
  end
  for j = 0, n - 1 do
    local w = WS_W * j
    local C, costs = W[w + 2], W[w + 7]
    if C ~= nil and tonumber(costs) > 0 then
      local L = W[w + 1]
      ws_prepare(L, C, costs, L.target)
    end
  end
  local out = {1, 0}
  for j = 0, n - 1 do
    local w = WS_W * j
    out[j + 3] = ws_limitcommit(W[w + 1], ws_ckey(k, j), W[w + 2], W[w + 3], W[w + 4], W[w + 5], W[w + 7])
  end
  return out
end

-- ws_limits runs the commonest group, n limits and nothing else, without an
-- event id or time (Allow of several policies: store.AllowAll on one slot,
-- limit.Combine), at ARGV[i] (the first item's kind) and KEYS[k]. Its answer
-- and its writes are ws_group's; on the admitted path it builds no item
-- tables and walks ARGV twice, where ws_group parses every item into a table
-- of sixteen fields and walks the items four times: in a group of three
-- limits that machinery cost more than the windows' own arithmetic. Each
-- counter is opened by the backend's ws_fastopen, which answers the
-- counter's new total and bucket (nt, nv) and its read R when the backend
-- can count the cost on a fast path of its own, and the counter's state C
-- otherwise (see ops.lua); ws_limitsend answers and writes.
local function ws_limits(H, i, k, n)
  -- (W is made at the size of four limits' slots, so that it is not rehashed
  -- as it fills.)
  local W, allowed = {false, false, false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false, false, false}, true
  for j = 0, n - 1 do
    local a = i + 4 * j
    local L = ws_shape(H, ARGV[a + 1])
    local limit, costs = ws_tonum(ARGV[a + 2]), ARGV[a + 3]
    local cost = ws_tonum(costs)
    local nt, nv, R, C = ws_fastopen(L, ws_ckey(k, j), limit, cost)
    if nt == nil then
      ws_checked(C.sum, C.fits)
      if not (cost <= limit and ws_le(C.sum, limit - cost)) then allowed = false end
    end
    local w = WS_W * j
    W[w + 1], W[w + 2], W[w + 3], W[w + 4], W[w + 5], W[w + 6], W[w + 7] = L, C, nt, nv, R, limit, costs
  end
  return ws_limitsend(H, W, k, n, allowed)
end

-- ws_wscratch holds ws_wlimits' fast path's nt, nv and R per limit, from one
-- call to the next (a table made per operation would be garbage to collect).
local ws_wscratch = {}

-- ws_policies parses a compact operation's policies (WS_OP_LIMITS): n
-- limits' shapes and limits, space-separated, in one argument ("1000:60000 5
-- 60000:3600000 20"), as a table P of strings, P[2j + 1] the shape of limit
-- j (from 0) and P[2j + 2] its limit; once for the calls that share them
-- (kept from one call to the next, at most 256 of them). An argument costs
-- the server several hundred instructions to read, hold and free, more than
-- a parse shared by many operations: three limits in one argument take five
-- fewer arguments.
local ws_policies = nil
do
  local kept, nk = {}, 0
  ws_policies = function(spec, n)
    local P = kept[spec]
    if P == nil then
      P = {}
      for w in string.gmatch(spec, '[^ ]+') do P[#P + 1] = w end
      if nk >= 256 then kept, nk = {}, 0 end
      kept[spec], nk = P, nk + 1
    end
    if #P ~= 2 * n then ws_err(WS_E_ARGS, 'malformed policies: ' .. spec) end
    return P
  end
end

-- ws_wlimits runs n limits of one cost, nothing else, without an event id or
-- time, from their compact operation (WS_OP_LIMITS: store.AllowAll of
-- policies of one slot, such as the windows of one key): costs is the cost
-- (a decimal string), P each limit's shape and limit (see ws_policies);
-- KEYS[k] on, the counters' keys.
-- When every counter counts the cost on its backend's fast path (ws_fastopen:
-- on the plain hash, a record synced and on the current bucket), it writes
-- the costs and answers {1, sum, reset, sum, reset...}, a sum and a reset
-- per limit, without a table per limit. Otherwise it answers and writes as
-- ws_limits does (ws_limitsend: a reply of ws_group's shape).
-- With moves (from ws_hlimits, whose lean path failed), the plain hash's
-- limits go from ws_headmoves on.
local function ws_wlimits(H, P, costs, k, n, moves)
  if ws_headlimits ~= nil then
    local out
    if moves then
      out = ws_headmoves(H, P, costs, k, n)
    else
      out = ws_headlimits(H, P, costs, k, n)
    end
    if out ~= nil then return out end
  end
  local cost, S = ws_tonum(costs), ws_wscratch
  for j = 0, n - 1 do
    local a = 1 + 2 * j
    local L = ws_shape(H, P[a])
    local limit = ws_tonum(P[a + 1])
    local nt, nv, R, C = ws_fastopen(L, ws_ckey(k, j), limit, cost)
    if nt == nil then
      -- The general path, from limit j on (those before it are on the fast
      -- path, opened: nothing was written).
      local W, allowed = {}, true
      for q = 0, n - 1 do
        local b, w = 1 + 2 * q, WS_W * q
        local Lq, lq = ws_shape(H, P[b]), ws_tonum(P[b + 1])
        local ntq, nvq, Rq, Cq
        if q < j then
          ntq, nvq, Rq = S[3 * q + 1], S[3 * q + 2], S[3 * q + 3]
        elseif q == j then
          Cq = C
        else
          ntq, nvq, Rq, Cq = ws_fastopen(Lq, ws_ckey(k, q), lq, cost)
        end
        if ntq == nil then
          ws_checked(Cq.sum, Cq.fits)
          if not (cost <= lq and ws_le(Cq.sum, lq - cost)) then allowed = false end
        end
        W[w + 1], W[w + 2], W[w + 3], W[w + 4], W[w + 5], W[w + 6], W[w + 7] = Lq, Cq, ntq, nvq, Rq, lq, costs
      end
      return ws_limitsend(H, W, k, n, allowed)
    end
    S[3 * j + 1], S[3 * j + 2], S[3 * j + 3] = nt, nv, R
  end
  -- (out is made at the size of three limits' answers, then cut to n's.)
  local out = {1, false, false, false, false, false, false}
  for j = 0, n - 1 do
    local L, nt = ws_shape(H, P[1 + 2 * j]), S[3 * j + 1]
    ws_fastcommit(L, ws_ckey(k, j), nt, S[3 * j + 2], S[3 * j + 3])
    out[2 * j + 2], out[2 * j + 3] = nt, L.reset
  end
  for x = 2 * n + 2, 7 do out[x] = nil end
  return out
end

-- ws_hlimits is ws_wlimits for the compact operation of limits whose
-- counters share one head (WS_OP_LIMITSH: the plain hash's windows of one
-- key, store.AllowAll of stores of one prefix), which declares the head once:
-- KEYS[k] to KEYS[k + n - 1] are the counters' hashes, KEYS[k + n] their
-- head (a declared key costs the server more than a thousand instructions:
-- three limits take four keys, not six). Off ws_headlimits' lean path, it
-- lays the keys out as ws_wlimits takes them, each hash and the head, at
-- KEYS' end (names already declared), and goes on there.
local function ws_hlimits(H, P, costs, k, n)
  if ws_headlimits == nil then ws_err(WS_E_ARGS, 'a shared head on a backend without heads') end
  local out = ws_headlimits(H, P, costs, k, n, true)
  if out ~= nil then return out end
  local x, hk = #KEYS, KEYS[k + n]
  for j = 0, n - 1 do
    KEYS[x + 2 * j + 1], KEYS[x + 2 * j + 2] = KEYS[k + j], hk
  end
  return ws_wlimits(H, P, costs, x + 1, n, true)
end

-- Linked groups: the groups of one decision across entities and slots
-- (store.ApplyAll), whose limits admit all together or none. Each group is
-- run as a reservation: as usual, but an admitted group with an event id
-- records the instant T it counted at ('1@T'). When another group refuses,
-- each admitted one is unreserved: what it counted only because its limits
-- admitted (limit costs, the other tiers of a limited counter, leases it
-- acquired) is taken back from the buckets it went to, and its id is deleted
-- (or kept as '0,L' when the group also made unconditional writes, which
-- count once whatever the decision):
--
--   WS_OP_LINK     n group...  one server: the n groups (each as after
--                              WS_OP_GROUP), reserved in turn and, when one
--                              refuses or fails, the admitted ones
--                              unreserved in the same call; the reply is
--                              each group's own (an error reply for one that
--                              failed). Groups of limits alone without an
--                              event id or time are decided together
--                              instead, with the same replies, and a
--                              refusal writes nothing (ws_linklimits)
--   WS_OP_RESERVE  group       a cluster, phase one: the group, reserved
--   WS_OP_UNDO     group       phase two, when a group refused: the same
--                              arguments and keys as a reserved group;
--                              unreserves it if its id still says '1@T' (so
--                              a resent undo does nothing); answers 1, else 0
--
-- Between a reservation and its undo, other callers see the reserved count:
-- it may refuse them (never admit more than a limit). A reservation whose undo
-- never comes (the client died) stays counted, as an admitted event, until
-- its bucket leaves the window.

-- ws_unreserve takes back group G's conditional writes, made at instant T
-- (on the script's clock), and settles its id.
local function ws_unreserve(G, T)
  local undo, keep = {}, false
  for _, it in ipairs(G.items) do
    local kind = it.kind
    if (kind == WS_IT_LIMIT and it.cost > 0) or (kind == WS_IT_IFOK and it.delta ~= '0') then
      -- The bucket it counted in, if it is still live (a clock that went
      -- back counts it in the current one).
      local B = ws_target(it.L, math.min(T, it.L.now))
      if B ~= nil then
        it.B, it.d = B, '-' .. it.delta
        it.C = ws_open(it.L, it.key, B)
        ws_prepare(it.L, it.C, it.d, B)
        undo[#undo + 1] = it
      end
    elseif kind == WS_IT_ACQUIRE then
      undo[#undo + 1] = it
    elseif kind ~= WS_IT_READ and kind ~= WS_IT_XREAD and not (kind == WS_IT_DISTINCT and #it.members == 0) then
      keep = true
    end
  end
  for _, it in ipairs(undo) do
    if it.kind == WS_IT_ACQUIRE then
      redis.call('ZREM', it.key, it.id)
    else
      ws_commit(it.L, it.key, it.C, it.B)
    end
  end
  if G.idkey ~= nil then
    if keep then
      redis.call('SET', G.idkey, '0,L', 'KEEPTTL')
    else
      redis.call('DEL', G.idkey)
    end
  end
end

-- ws_reserved is the instant a group's id record says it was reserved at
-- ('1@T'); nil when there is none.
local function ws_reserved(G)
  if G.idkey == nil then return nil end
  local rec = redis.call('GET', G.idkey)
  if not rec or string.sub(rec, 1, 2) ~= '1@' then return nil end
  return tonumber(string.sub(rec, 3))
end

local function ws_undo(G)
  local T = ws_reserved(G)
  if T == nil then return 0 end
  ws_unreserve(G, T)
  return 1
end

-- ws_readgroup parses a group at ARGV[i] (after its code) and KEYS[k]; it
-- answers where the next operation starts in each, and the group.
local function ws_readgroup(H, i, k)
  local n = tonumber(ARGV[i])
  local G = {items = {}, H = H}
  local id, et = ARGV[i + 1], ARGV[i + 3]
  if id ~= '' then
    G.idkey, G.ttl = KEYS[k], ARGV[i + 2]
    k = k + 1
  end
  if et ~= '' then G.e = tonumber(et) end
  i = i + 4
  for j = 1, n do
    local kind = ARGV[i]
    local it
    if kind == WS_IT_ACQUIRE or kind == WS_IT_REFRESH or kind == WS_IT_RELEASE then
      -- A lease (lease.lua): its own fields.
      it = {kind = kind, key = KEYS[k], lease = true, limit = tonumber(ARGV[i + 1]), ttl = tonumber(ARGV[i + 2]),
        id = ARGV[i + 3], mine = nil, held = nil, fits = nil, refused = nil, retry = nil}
    else
      -- The fields set later are named here, as nil: the constructor sizes
      -- the table for them, so that it never grows (and is rehashed) field
      -- by field.
      it = {kind = kind, L = ws_shape(H, ARGV[i + 1]), key = KEYS[k], limit = nil, cost = nil, delta = nil,
        members = nil, K = nil, B = nil, C = nil, S = nil, Q = nil, d = nil, read = nil, fits = nil, refused = nil,
        dir = nil, X = nil, own = nil}
    end
    k = k + 1
    if kind == WS_IT_LIMIT or kind == WS_IT_COUNT or kind == WS_IT_QUIET or kind == WS_IT_IFOK or kind == WS_IT_READ then
      it.key, k = ws_ckey(k - 1, 0), k - 1 + WS_KPC -- a counter: its keys (see ws_ckey)
    end
    if it.lease then
      i = i + 4
    elseif kind == WS_IT_LIMIT then
      it.limit, it.delta = tonumber(ARGV[i + 2]), ARGV[i + 3]
      it.cost = tonumber(it.delta)
      i = i + 4
    elseif kind == WS_IT_DISTINCT then
      local m = tonumber(ARGV[i + 2])
      it.members = ws_args(i + 3, i + 2 + m)
      it.K, k = ws_dk(it.L, k - 1) -- the item's keys (see distinct.lua)
      i = i + 3 + m
    elseif kind == WS_IT_COUNT or kind == WS_IT_QUIET or kind == WS_IT_IFOK then
      it.delta = ARGV[i + 2]
      i = i + 3
    elseif kind == WS_IT_READ then
      i = i + 2
    elseif kind == WS_IT_XREAD then
      it.dir = ARGV[i + 2]
      i = i + 3
    elseif kind == WS_IT_EXTREME then
      it.dir, it.delta = ARGV[i + 2], ARGV[i + 3]
      i = i + 4
    else
      ws_err(WS_E_ARGS, 'unknown group item ' .. tostring(kind))
    end
    G.items[j] = it
  end
  return i, k, G
end

-- ws_readfast parses a group at ARGV[i] (its number of items) and KEYS[k]
-- for ws_fastgroup: it answers nil when the group has an event time, no
-- item, or an item other than a count, a limit, a distinct add or an
-- extreme (a window statistic's write); else where
-- the next operation starts in each, the items (a distinct add's keys and
-- members read as ws_readgroup reads them), and the event id's key (nil
-- without one).
local function ws_readfast(H, i, k)
  if ARGV[i + 3] ~= '' or ARGV[i] == '0' then return nil end
  local idkey = nil
  if ARGV[i + 1] ~= '' then
    idkey, k = KEYS[k], k + 1
  end
  local its, a = {}, i + 4
  for j = 1, tonumber(ARGV[i]) do
    local kind = ARGV[a]
    if kind ~= WS_IT_COUNT and kind ~= WS_IT_LIMIT and kind ~= WS_IT_DISTINCT and kind ~= WS_IT_EXTREME then return nil end
    local it = {kind = kind, L = ws_shape(H, ARGV[a + 1]), key = KEYS[k], a = a, nt = nil, nv = nil, R = nil, C = nil,
      K = nil, members = nil, X = nil}
    if kind == WS_IT_COUNT then
      it.key = ws_ckey(k, 0)
      a, k = a + 3, k + WS_KPC
    elseif kind == WS_IT_LIMIT then
      it.key = ws_ckey(k, 0)
      a, k = a + 4, k + WS_KPC
    elseif kind == WS_IT_EXTREME then
      a, k = a + 4, k + 1
    elseif kind == WS_IT_DISTINCT and tonumber(ARGV[a + 2]) > 0 then
      local m = tonumber(ARGV[a + 2])
      it.members = ws_args(a + 3, a + 2 + m)
      it.K, k = ws_dk(it.L, k)
      a = a + 3 + m
    else
      return nil
    end
    its[j] = it
  end
  return a, k, its, idkey
end

-- ws_fastgroup runs a group of counts, limits, distinct adds and extremes
-- without an event time (an entity's batch of features.Set.Record), parsed by
-- ws_readfast from ARGV[i] and KEYS[k], as ws_limits runs a group of limits:
-- each counter opened by the backend's ws_fastopen (a count as ws_add opens
-- it), without ws_group's tables and passes. Its answer and writes are
-- ws_group's: every counter is read before anything is written, an overflow
-- raises before any write, the HyperLogLogs are written before the
-- counters, and an event id (idkey) is kept for its time to live once the
-- group wrote. An extreme is prepared (read, checked) with the counters'
-- writes, in item order, and written in its turn, as ws_group does. An event
-- seen before, and a refusal, are ws_group's (with the counters opened here
-- handed over).
local function ws_fastgroup(H, i, k, its, idkey)
  if idkey ~= nil and redis.call('GET', idkey) then
    local _, _, G = ws_readgroup(H, i, k)
    return ws_group(G)
  end
  local allowed = true
  for _, it in ipairs(its) do
    local kind, a = it.kind, it.a
    if kind == WS_IT_COUNT or kind == WS_IT_LIMIT then
      local limit, cost = WS_BIG - 1, tonumber(ARGV[a + 2])
      if kind == WS_IT_LIMIT then limit, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]) end
      local C
      it.nt, it.nv, it.R, C = ws_fastopen(it.L, it.key, limit, cost)
      it.C = C
      if it.nt == nil and kind == WS_IT_LIMIT then
        ws_checked(C.sum, C.fits)
        if not (cost <= limit and ws_le(C.sum, limit - cost)) then allowed = false end
      end
    end
  end
  if not allowed then
    local _, _, G = ws_readgroup(H, i, k)
    for j, it in ipairs(its) do
      if it.kind == WS_IT_COUNT or it.kind == WS_IT_LIMIT then
        G.items[j].C = it.C or ws_open(it.L, it.key, it.L.target, it.R)
      end
    end
    return ws_group(G)
  end
  for _, it in ipairs(its) do
    local C = it.C
    if it.kind == WS_IT_EXTREME then
      it.X = ws_xprepare(it.L, it.key, ARGV[it.a + 2], ARGV[it.a + 3], nil, it.L.target)
    elseif C ~= nil then
      if it.kind == WS_IT_COUNT then
        ws_prepare(it.L, C, ARGV[it.a + 2], it.L.target)
      elseif tonumber(ARGV[it.a + 3]) > 0 then
        ws_prepare(it.L, C, ARGV[it.a + 3], it.L.target)
      end
    end
  end
  for _, it in ipairs(its) do
    if it.kind == WS_IT_DISTINCT then ws_dadd(it.L, it.K, it.L.target, it.members) end
  end
  local out, wrote = {1, 0}, false
  for j, it in ipairs(its) do
    local L, kind = it.L, it.kind
    if kind == WS_IT_DISTINCT then
      out[j + 2], wrote = ws_dcount(L, it.K, L.now - L.w), true
    elseif kind == WS_IT_EXTREME then
      out[j + 2], wrote = ws_xans(1, ws_xcommit(L, it.key, it.X, L.target)), true
    elseif kind == WS_IT_LIMIT then
      out[j + 2] = ws_limitcommit(L, it.key, it.C, it.nt, it.nv, it.R, ARGV[it.a + 3])
      if tonumber(ARGV[it.a + 3]) > 0 then wrote = true end
    elseif it.nt ~= nil then
      ws_fastcommit(L, it.key, it.nt, it.nv, it.R)
      out[j + 2], wrote = it.nt, true
    else
      out[j + 2], wrote = (ws_commit(L, it.key, it.C, L.target)), true
    end
  end
  if idkey ~= nil and wrote then redis.call('SET', idkey, '1', 'PX', ARGV[i + 2]) end
  return out
end

-- ws_link runs the groups of a link in turn, each reserved (ws_group, or
-- ws_fastgroup for a group without an event id that ws_readfast parsed:
-- {fast = its items, H, i, k}, its answer and writes ws_group's), and, when
-- one refuses or fails, takes back the admitted ones (a fast group is parsed
-- whole for that).
local function ws_link(Gs)
  local out, all = {}, true
  for j, G in ipairs(Gs) do
    G.reserve = true
    local ok, r
    if G.fast then
      ok, r = pcall(ws_fastgroup, G.H, G.i, G.k, G.fast, nil)
    else
      ok, r = pcall(ws_group, G)
    end
    if ok then
      G.ok, G.now = r[1] % 2 == 1, r[1] < 2
      if not G.ok then all = false end
    else
      all = false
    end
    out[j] = ws_result(ok, r)
  end
  if all then return out end
  for _, G in ipairs(Gs) do
    if G.fast and G.ok then
      local _, _, P = ws_readgroup(G.H, G.i, G.k)
      P.ok, P.now = G.ok, G.now
      G = P
    end
    local decides = false
    for _, it in ipairs(G.items or {}) do
      if it.kind == WS_IT_LIMIT or it.kind == WS_IT_ACQUIRE then decides = true end
    end
    if G.ok and decides then
      -- Admitted now, at this instant, or by an earlier call of the event
      -- (a group without limits has nothing to take back).
      local T = G.H.now
      if not G.now then T = ws_reserved(G) end
      if T ~= nil then ws_unreserve(G, T) end
    end
  end
  return out
end

-- ws_linkopen opens the counters of a link's groups of limits for
-- ws_linklimits, into W (five slots per item, as ws_limits fills them), and
-- prepares the writes of each group whose limits all admit (ok[q] says so of
-- group q): reads only. A prepare raises on an overflow, before anything is
-- written.
local function ws_linkopen(H, gs, W, ok)
  local m = 0
  for q, g in ipairs(gs) do
    local fits = true
    for j = 0, g.n - 1 do
      local a = g.i + 4 * j
      local L = ws_shape(H, ARGV[a + 1])
      local limit, cost = ws_tonum(ARGV[a + 2]), ws_tonum(ARGV[a + 3])
      local nt, nv, R, C = ws_fastopen(L, ws_ckey(g.k, j), limit, cost)
      if nt == nil and not (C.fits and cost <= limit and ws_le(C.sum, limit - cost)) then fits = false end
      W[5 * m + 1], W[5 * m + 2], W[5 * m + 3], W[5 * m + 4], W[5 * m + 5] = L, C, nt, nv, R
      m = m + 1
    end
    ok[q] = fits
  end
  m = 0
  for q, g in ipairs(gs) do
    for j = 0, g.n - 1 do
      local C, d = W[5 * m + 2], ARGV[g.i + 4 * j + 3]
      if ok[q] and C ~= nil and tonumber(d) > 0 then
        local L = W[5 * m + 1]
        ws_prepare(L, C, d, L.target)
      end
      m = m + 1
    end
  end
end

-- ws_linkrefused answers a refused link of groups of limits (see
-- ws_linklimits) without writing: each group whose limits all admit
-- answers what ws_group answers when it counts the costs (as ws_link does,
-- before it takes them back), computed from the prepared states; each other
-- group answers ws_group's refusal (which writes nothing without an event
-- id), its counters handed over. It answers nil when a group that admits
-- mixes costs of 0 with others, or a cost leaves its bucket at 0: ws_group's
-- answer would read the counter after its write (the caller then runs the
-- link whole, as ws_link does).
local function ws_linkrefused(H, gs, W, ok)
  local outs, m = {}, 0
  for q, g in ipairs(gs) do
    if ok[q] then
      local out, zero, some = {1, 0}, false, false
      for j = 0, g.n - 1 do
        local L, C, nt = W[5 * m + 1], W[5 * m + 2], W[5 * m + 3]
        local B = L.target
        if nt ~= nil then
          out[j + 3], some = {nt, 0, B.start + L.w - L.now, 0}, true
        elseif tonumber(ARGV[g.i + 4 * j + 3]) > 0 then
          if tonumber(C.nv) == 0 then return nil end
          out[j + 3], some = {C.nsum, 0, B.start + L.w - L.now, 0}, true
        else
          out[j + 3], zero = {C.sum, 0, ws_reset(L, ws_detail(L, ws_ckey(g.k, j), C)), 0}, true
        end
        m = m + 1
      end
      if zero and some then return nil end
      outs[q] = out
    else
      local _, _, G = ws_readgroup(H, g.i - 4, g.k)
      for j = 1, g.n do
        local it = G.items[j]
        it.C = W[5 * m + 2] or ws_open(it.L, it.key, it.L.target, W[5 * m + 5])
        m = m + 1
      end
      outs[q] = ws_result(pcall(ws_group, G))
    end
  end
  return outs
end

-- ws_linklimits runs a link (WS_OP_LINK) whose groups are all limits,
-- without an event id or time (store.AllowAll across slots on one server),
-- as ws_limits runs one such group: every counter opened (ws_linkopen,
-- reads only), then, when every limit admits, every write made; each
-- group's answer is then ws_group's for an admitted group, {1, 0, item...}.
-- A refusal writes nothing (ws_linkrefused). ws_link instead runs each
-- group through ws_group as a reservation, counting the costs of a group
-- that admits and taking them back when another refuses. The groups are of
-- different slots, so no group's writes change another's counters: the
-- answers are ws_link's. When a counter's read fails or leaves int64, or a
-- prepare overflows, it has written nothing and runs the link as ws_link
-- does (its errors are ws_link's). gs lists the groups, each as {i = its
-- first item in ARGV, k = its first key in KEYS, n = its items}.
local function ws_linklimits(H, gs)
  if ws_leanlink ~= nil then
    local outs = ws_leanlink(H, gs)
    if outs ~= nil then return outs end
  end
  local W, ok = {}, {}
  local opened = pcall(ws_linkopen, H, gs, W, ok)
  if opened then
    local all = true
    for q = 1, #gs do all = all and ok[q] end
    if all then
      local outs, m = {}, 0
      for q, g in ipairs(gs) do
        local out = {1, 0}
        for j = 0, g.n - 1 do
          out[j + 3] = ws_limitcommit(W[5 * m + 1], ws_ckey(g.k, j), W[5 * m + 2], W[5 * m + 3], W[5 * m + 4],
            W[5 * m + 5], ARGV[g.i + 4 * j + 3])
          m = m + 1
        end
        outs[q] = out
      end
      return outs
    end
    local outs = ws_linkrefused(H, gs, W, ok)
    if outs ~= nil then return outs end
  end
  local Gs = {}
  for q, g in ipairs(gs) do
    local _, _, G = ws_readgroup(H, g.i - 4, g.k)
    Gs[q] = G
  end
  return ws_link(Gs)
end
