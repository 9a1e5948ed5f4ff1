-- Decisions: when a refused cost fits. ws_reset: ms until every live bucket
-- that is not 0 has left (S: ws_detail's live buckets); ws_retry: ms until
-- enough have left for cost to fit under limit, if nothing else is counted
-- (-1: never); ws_groupretry: the earliest ms at which every limit of a group
-- admits (each item: L, S, cost, limit, fits; it.own gets its own retry);
-- exact, on doubles while S.kmag < 2^53, else on pairs (exact.lua).

local function ws_reset(L, S)
  local last = nil
  for i = 1, S.live do
    if S.raw[i] ~= '0' and (last == nil or S.starts[i] > last) then last = S.starts[i] end
  end
  if last == nil then return 0 end
  return last + L.w - L.now
end

-- ws_leaving lists the indices of S's live buckets oldest first (distinct
-- starts, sorted as numbers: no comparator to call).
local function ws_leaving(S)
  local order, at = {}, {}
  for i = 1, S.live do
    local s = S.starts[i]
    order[i], at[s] = s, i
  end
  table.sort(order)
  for i = 1, S.live do order[i] = at[order[i]] end
  return order
end

-- ws_walker is the running sum of a limit's live buckets as they leave:
-- r.fits says whether the cost fits in what is left.
local function ws_walker(it)
  local S = it.S
  local r = {it = it, order = ws_leaving(S), next = 1, big = S.kmag >= WS_BIG, rem = 0, hi = 0, lo = 0, xh = 0, xl = 0,
    fits = false}
  for j = 1, S.live do
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
  return r
end

-- ws_leave takes the buckets that have left by tau (ms from now) off the
-- walker's sum; it reports whether the walker's fits changed.
local function ws_leave(r, tau)
  local it = r.it
  local L, S, order = it.L, it.S, r.order
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
  if not moved then return false end
  local f
  if r.big then f = ws_sign(r.hi - r.xh, r.lo - r.xl) <= 0 else f = r.rem <= it.limit - it.cost end
  if f == r.fits then return false end
  r.fits = f
  return true
end

local function ws_retry(L, S, cost, limit)
  if cost > limit then return -1 end
  if S.kmag < WS_BIG then -- (on doubles, exact: ws_walker's walk without its tables)
    local vals, rem, x = S.vals, 0, limit - cost
    for i = 1, S.live do rem = rem + vals[i] end
    if rem <= x then return 0 end
    for _, j in ipairs(ws_leaving(S)) do
      rem = rem - vals[j]
      if rem <= x then return S.starts[j] + L.w - L.now end
    end
    return -1
  end
  local r = ws_walker({L = L, S = S, cost = cost, limit = limit})
  if r.fits then return 0 end
  for _, j in ipairs(r.order) do
    if ws_leave(r, S.starts[j] + L.w - L.now) and r.fits then return S.starts[j] + L.w - L.now end
  end
  return -1
end

-- ws_groupretry walks the moments the limits' buckets leave, in time order,
-- counting the limits that admit (a negative bucket leaving raises a sum):
-- O(T log T). With no negative bucket the retry is the latest limit's own.
local function ws_groupretry(limits)
  local mono = true
  for _, it in ipairs(limits) do
    if it.cost > it.limit then return -1 end
    local S = it.S
    for j = 1, S.live do
      if S.vals[j] < 0 then mono = false end
    end
  end
  if mono then
    local latest = 0
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
    local S = it.S
    for j = 1, S.live do taus[#taus + 1] = S.starts[j] + it.L.w - it.L.now end
    R[q] = ws_walker(it)
    if R[q].fits then fit = fit + 1 end
  end
  if fit == n then return 0 end
  table.sort(taus)
  for _, tau in ipairs(taus) do
    for q = 1, n do
      if ws_leave(R[q], tau) then
        if R[q].fits then fit = fit + 1 else fit = fit - 1 end
      end
    end
    if fit == n then return tau end
  end
  return -1
end
