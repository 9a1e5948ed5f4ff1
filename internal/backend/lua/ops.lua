-- The operations, on top of the backend's primitives:
--
--   ws_open(L, key, B) -> C          the counter's state; C.sum is its window
--                                    sum (a double when exact, else a decimal
--                                    string), C.fits whether it is within
--                                    int64. B is the bucket a write will go
--                                    to. It writes nothing.
--   ws_put(L, key, C, delta, B) -> sum, v
--                                    adds delta (a decimal string) to bucket B
--                                    and returns the new window sum and the
--                                    bucket's new value; writes nothing when
--                                    the sum or the bucket would leave int64
--   ws_prepare(L, C, delta, B)       ws_put's checks alone: raises when the
--                                    sum or the bucket would leave int64,
--                                    writes nothing; ws_commit(L, key, C, B)
--                                    -> sum, v then writes what it prepared
--                                    (a group prepares all, then commits)
--   ws_quiet(L, key, delta, B) -> Q  the same for a write that answers no sum:
--                                    ws_quietcommit(L, key, Q, B) writes it
--   ws_detail(L, key, C) -> S        the live buckets (see ws_scan, keep): from
--                                    C's read if it has one, else a new read
--   ws_addnosum(L, key, delta, B)    a write that need not return the sum, or
--                                    nil: AddNoSum is then Add (ws_addquiet)
--   ws_sumover(L, key, lb)           the read-only sum over a lookback
--   ws_fastopen(L, key, limit, cost) -> nt, nv, R | nil, nil, nil, C
--                                    the open of a write of cost (a number)
--                                    to the current bucket under limit (Add,
--                                    Allow, a group of limits): a backend
--                                    with a fast path answers, when limit
--                                    admits cost, the new window sum and
--                                    bucket value and its read R, which
--                                    ws_fastcommit(L, key, nt, nv, R) writes
--                                    and ws_open(L, key, B, R) turns into a
--                                    state without reading again; otherwise
--                                    (or without a fast path) nil and
--                                    ws_open's state for the current bucket
--   ws_peek(L, key, C[, cost, limit]) -> P | nil
--                                    a few of a refused counter's buckets:
--                                    P.starts, P.vals (doubles), P.raw (the
--                                    fields as read, false where none) hold
--                                    the P.nold oldest live ones, then the
--                                    newest, in time order; P.whole says
--                                    that they are every live bucket. nil
--                                    when the backend has no such read, or
--                                    the few buckets would not do (see
--                                    ws_peekretry, ws_peekreset): the
--                                    refusal reads the counter whole
--   ws_peekreach(L) -> ms           how far (from now) a peek of a counter
--                                    of shape L sees every bucket that
--                                    leaves (-math.huge: no peek)
--
-- An operation either fails before it writes, or leaves every counter
-- consistent: so a failed operation changes no count.

-- ws_le reports whether sum (as ws_num leaves it) <= x (an exact double).
local function ws_le(sum, x)
  if type(sum) == 'number' then return sum <= x end
  local hi, lo = ws_split(sum)
  local xh, xl = ws_splitnum(x)
  return ws_sign(hi - xh, lo - xl) <= 0
end

-- ws_reset is the time until every live bucket that is not 0 has left the
-- window: when the sum returns to 0 if nothing else is counted.
local function ws_reset(L, S)
  local last = nil
  for i = 1, S.live do
    if S.raw[i] ~= '0' and (last == nil or S.starts[i] > last) then last = S.starts[i] end
  end
  if last == nil then return 0 end
  return last + L.w - L.now
end

-- ws_leaving lists the indices of S's live buckets (see ws_scan, keep)
-- oldest first: the order in which they leave the window. The starts are
-- distinct, so they sort as numbers: table.sort with a comparator of its own
-- calls it per comparison, which costs more than the rest of a refusal.
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

-- ws_retry is the time until enough buckets have left the window for cost to
-- fit under limit, if nothing else is counted; -1 when it never will. The
-- buckets leave oldest first; the first moment the rest of the sum plus cost
-- is within the limit is the answer. It is exact: on doubles when the
-- magnitudes of the live values add up to less than 2^53, else on pairs.
local function ws_retry(L, S, cost, limit)
  if cost > limit then return -1 end
  local order = ws_leaving(S)
  if S.kmag < WS_BIG then
    local rem = 0
    for i = 1, S.live do rem = rem + S.vals[i] end
    for _, i in ipairs(order) do
      rem = rem - S.vals[i]
      if rem <= limit - cost then return S.starts[i] + L.w - L.now end
    end
    return -1
  end
  local hi, lo = 0, 0
  for i = 1, S.live do
    local h, l = ws_split(S.raw[i])
    hi, lo = hi + h, lo + l
  end
  local xh, xl = ws_splitnum(limit - cost)
  for _, i in ipairs(order) do
    local h, l = ws_split(S.raw[i])
    hi, lo = hi - h, lo - l
    if ws_sign(hi - xh, lo - xl) <= 0 then return S.starts[i] + L.w - L.now end
  end
  return -1
end

-- ws_peekreset is ws_reset from a peek P (see ws_peek), or nil when the
-- newest bucket that is not 0 may lie between P's oldest and newest ones.
-- (ws_peek reads the newest buckets far enough back, when it can, for a
-- counter whose current bucket holds nothing.)
local function ws_peekreset(L, P)
  local vals = P.vals
  for i = #vals, 1, -1 do
    if i <= P.nold and not P.whole then return nil end
    if vals[i] ~= 0 then return P.starts[i] + L.w - L.now end
  end
  return 0
end

-- ws_peekretry is ws_retry from a peek P of a counter whose window sum is
-- sum, or nil when the cost fits only after a bucket P did not read leaves.
-- The walk starts from the window sum, the running total the decision used.
-- It is exact: ws_peek saw to it that sum and the magnitudes it read add up
-- to less than 2^53.
local function ws_peekretry(L, P, sum, cost, limit)
  if cost > limit then return -1 end
  local last, raw, vals = P.nold, P.raw, P.vals
  if P.whole then last = #vals end
  for i = 1, last do
    if raw[i] then
      sum = sum - vals[i]
      if sum <= limit - cost then return P.starts[i] + L.w - L.now end
    end
  end
  return nil
end

-- ws_add adds delta to the current bucket and answers the new window sum.
-- It is a limit that always admits: the backend's fast path (ws_fastopen)
-- takes a positive delta on a synced counter whose numbers stay below 2^53.
local function ws_add(L, key, delta)
  if ws_leanone ~= nil then
    local nt = ws_leanone(L, key, delta, WS_BIG - 1)
    if nt ~= nil then return nt end
  end
  local nt, nv, R, C = ws_fastopen(L, key, WS_BIG - 1, ws_tonum(delta))
  if nt ~= nil then
    ws_fastcommit(L, key, nt, nv, R)
    return nt
  end
  return (ws_put(L, key, C, delta, L.target))
end

-- ws_addquiet is AddNoSum: the backend's ws_addnosum, which need not read
-- the counter; or, on a backend without one (the plain hash, whose every
-- write moves a running total), Add without the answer, on Add's paths (a
-- synced counter's head alone).
local function ws_addquiet(L, key, delta)
  if ws_addnosum == nil then
    ws_add(L, key, delta)
    return 1
  end
  return ws_addnosum(L, key, delta, L.target)
end

-- ws_allow counts cost (a canonical decimal string, as the client sends it; at
-- most 2^53, as is limit, a number) in the current bucket only if the window
-- sum stays within limit. It answers {allowed, sum, retry ms, reset ms}. A
-- refusal writes nothing. The backend's fast path (ws_fastopen) takes the
-- common case, an admitted cost on a counter already synced. (Otherwise the
-- cost goes on to ws_put as the client's string: no string.format of it.)
local function ws_allow(L, key, limit, costs)
  local B = L.target
  if ws_leanone ~= nil and limit < WS_BIG then
    local nt = ws_leanone(L, key, costs, limit)
    if nt ~= nil then return {1, nt, 0, B.start + L.w - L.now} end
  end
  local cost = ws_tonum(costs)
  local nt, nv, R, C = ws_fastopen(L, key, limit, cost)
  if nt ~= nil then
    ws_fastcommit(L, key, nt, nv, R)
    return {1, nt, 0, B.start + L.w - L.now}
  end
  ws_checked(C.sum, C.fits)
  if cost <= limit and ws_le(C.sum, limit - cost) then
    if cost == 0 then
      return {1, C.sum, 0, ws_reset(L, ws_detail(L, key, C))}
    end
    local sum, v = ws_put(L, key, C, costs, B)
    if v ~= 0 then return {1, sum, 0, B.start + L.w - L.now} end
    return {1, sum, 0, ws_reset(L, ws_detail(L, key, nil))}
  end
  local P = ws_peek(L, key, C, cost, limit)
  local retry = P and ws_peekretry(L, P, C.sum, cost, limit)
  local reset = retry and ws_peekreset(L, P)
  if reset then return {0, C.sum, retry, reset} end
  local S = ws_detail(L, key, C)
  return {0, C.sum, ws_retry(L, S, cost, limit), ws_reset(L, S)}
end
