-- Events: the one write pipeline. An event is one or more groups, a group the
-- items of one Redis Cluster slot (an Add: one count; a feature set's Record:
-- a group per entity). An event runs each stage over all its groups: place
-- (read the event id, find each write's bucket, open each counter), decide
-- (each limit and acquire fits or not; the event admits when every limit of
-- every group does; a duplicate group brings its first decision), prepare
-- (check every write: an overflow, a key of another type, a HyperLogLog that
-- is not one), commit (write, keep the id, answer). So an error leaves every
-- key of the event as it was, and a refusal writes no limit's cost anywhere.
--
-- Items (their arguments: backend.Item*), and their answers:
--   WS_IT_COUNT, WS_IT_READ, WS_IT_IFOK   the window sum     WS_IT_QUIET   0
--   WS_IT_LIMIT    sum, retry ms, reset ms, refused (1 when it refused, in a
--                  duplicate's first too; fast.lua's: sum, reset ms)
--   WS_IT_DISTINCT the distinct count (without members: a read)
--   WS_IT_EXTREME  counted, value... (extreme.lua)   WS_IT_XREAD   1, value...
--   a lease's (lease.lua; an acquire is a limit): held, ok, retry ms, refused
--
-- A group's ARGV: the number of items, the event id ("" for none), the id's
-- time to live (ms), the event time ("" for now), then the items. KEYS: the
-- id's key (with an id), then each item's. A group answers flags, retry ms,
-- then per item the number of its values (negative: a write that could not
-- count) and the values; a link, its groups' in turn.
-- flags: 1 the event admitted (its limits counted), 2 the id was seen, 4 the
-- group has writes and none could count (too old), 16 (a reservation) the
-- record was this call's. A duplicate writes nothing and answers the state
-- now and the first decision (the id's record: '1', or '0' and the items that
-- refused, ',L' when another group did). An event time places the writes;
-- the limits decide now; a write whose bucket has left its window counts
-- nothing and answers its value now, marked late. A refused group without
-- unconditional writes keeps no id, so that a retry is decided anew. A
-- limit's cost, and an IFOK's delta, count only if the event admits. The
-- operations that run groups, and their phases on a cluster: backend.Op*.
--
-- A reservation not settled is another call's in flight until WS_STALE ms
-- after S: a check waits for it, a reservation takes it for a duplicate.
-- Past that, or when it is this call's own (resent after a lost reply), a
-- reservation takes it over: nothing more is written, and the record names
-- this call.
local WS_STALE = 5000

-- ws_newgroup and ws_item make a group and an item; the stages add fields.
local function ws_newgroup(H) return {H = H, items = {}, seen = nil, allowed = true, placed = false, retry = 0} end
local function ws_item(kind, L, key, delta) return {kind = kind, L = L, key = key, delta = delta, B = nil, C = nil} end

-- ws_parse reads a group at ARGV[i] (its number of items) and KEYS[k]: where
-- the next operation starts in each, and the group.
local function ws_parse(H, i, k)
  local n = ws_tonum(ARGV[i])
  local G = ws_newgroup(H)
  if ARGV[i + 1] ~= '' then
    G.idkey, G.ttl = KEYS[k], ARGV[i + 2]
    k = k + 1
  end
  if ARGV[i + 3] ~= '' then G.e = tonumber(ARGV[i + 3]) end
  i = i + 4
  for j = 1, n do
    local kind, it = ARGV[i], nil
    if kind == WS_IT_ACQUIRE or kind == WS_IT_REFRESH or kind == WS_IT_RELEASE then
      it = ws_item(kind, nil, KEYS[k], nil)
      it.lease, it.limit, it.ttl, it.id = true, tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
      i, k = i + 4, k + 1
    else
      local L = ws_shape(H, ARGV[i + 1])
      if kind == WS_IT_LIMIT then
        it = ws_item(kind, L, ws_ckey(k, 0), ARGV[i + 3])
        it.limit, it.cost = ws_tonum(ARGV[i + 2]), ws_tonum(it.delta)
        i, k = i + 4, k + WS_KPC
      elseif kind == WS_IT_COUNT or kind == WS_IT_QUIET or kind == WS_IT_IFOK then
        it = ws_item(kind, L, ws_ckey(k, 0), ARGV[i + 2])
        i, k = i + 3, k + WS_KPC
      elseif kind == WS_IT_READ then
        it = ws_item(kind, L, ws_ckey(k, 0), nil)
        i, k = i + 2, k + WS_KPC
      elseif kind == WS_IT_DISTINCT then
        local m = tonumber(ARGV[i + 2])
        it = ws_item(kind, L, KEYS[k], nil)
        it.members = ws_args(i + 3, i + 2 + m)
        it.K, k = ws_dk(L, k)
        i = i + 3 + m
      elseif kind == WS_IT_XREAD then
        it = ws_item(kind, L, KEYS[k], nil)
        it.dir, i, k = ARGV[i + 2], i + 3, k + 1
      elseif kind == WS_IT_EXTREME then
        it = ws_item(kind, L, KEYS[k], ARGV[i + 3])
        it.dir, i, k = ARGV[i + 2], i + 4, k + 1
      else
        ws_err(WS_E.ARGS, 'unknown item ' .. tostring(kind))
      end
    end
    G.items[j] = it
  end
  return i, k, G
end

-- ws_push appends it to G's list named name, made when first needed.
local function ws_push(G, name, it)
  local l = G[name]
  if l == nil then G[name] = {it} else l[#l + 1] = it end
end

-- ws_pending reads a reservation's record '1@T@S#n': T, own, own or stale.
local function ws_pending(rec, nonce)
  if string.sub(rec, 1, 2) ~= '1@' then return nil end
  local at, sep = string.find(rec, '@', 3, true), string.find(rec, '#', 3, true)
  if at == nil or sep == nil then return nil end
  local own = string.sub(rec, sep + 1) == nonce
  return tonumber(string.sub(rec, 3, at - 1)), own, own or ws_srvnow() - tonumber(string.sub(rec, at + 1, sep - 1)) >= WS_STALE
end

-- ws_place is the first stage: the id's record, each write's bucket (an event
-- beyond the future tolerance raises WS_E.FUTURE), each counter opened, each
-- lease read. Reads only.
local function ws_place(G)
  if G.idkey ~= nil then
    local rec = redis.call('GET', G.idkey)
    if rec then G.seen = rec end
    local T, own, stale = nil, false, false
    if rec then T, own, stale = ws_pending(rec, G.nonce) end
    if T ~= nil and G.check and not stale then
      ws_err(WS_E.PENDING, 'the event is being recorded by another call; nothing was written')
    elseif T ~= nil and G.nonce ~= nil and stale then
      -- This call's own reservation, resent, or one of a call that never
      -- finished (its undo or its settle lost), taken over: its cost is
      -- counted, nothing more is written.
      G.own = true
      if not own then G.adopt = '1@' .. string.format('%d', T) .. '@' .. string.format('%d', ws_srvnow()) .. '#' .. G.nonce end
    end
  end
  local some, items = false, G.items
  for j = 1, #items do
    local it = items[j]
    local kind, L = it.kind, it.L
    if it.lease then
      ws_lopen(it, G.H.now) -- a lease acts now, whatever the event time
      G.placed = true
      if kind == WS_IT_ACQUIRE then ws_push(G, 'deciders', it) end
    elseif kind == WS_IT_LIMIT then
      it.B, G.placed = L.target, true
      it.C = ws_open(L, it.key, it.B)
      ws_push(G, 'limits', it)
      ws_push(G, 'deciders', it)
    elseif kind == WS_IT_IFOK then
      it.B = L.target -- a limited counter's cost counts now, as the limits decide
      it.C = ws_open(L, it.key, it.B)
    elseif kind == WS_IT_READ or kind == WS_IT_XREAD or (kind == WS_IT_DISTINCT and #it.members == 0) then
      it.B, it.read = L.target, true
    else
      some = true
      it.B = G.e == nil and L.target or ws_target(L, G.e)
      if it.B ~= nil then
        G.placed = true
        if kind == WS_IT_COUNT then it.C = ws_open(L, it.key, it.B) end
      end
    end
  end
  G.late = some and not G.placed
end

-- ws_refusedby marks the deciders that refused an event the first time, from
-- its id's record ('0,j,k': items j and k; ',L': another group).
local function ws_refusedby(G, rec)
  if string.find(rec, ',L', 1, true) then return end
  for j in string.gmatch(rec, ',(%d+)') do
    local it = G.items[tonumber(j)]
    if it ~= nil and (it.kind == WS_IT_LIMIT or it.kind == WS_IT_ACQUIRE) then it.refused = true end
  end
end

-- ws_decide is the second stage, for one group: whether its own limits and
-- acquires admit (a duplicate: its first decision), and which refuse.
local function ws_decide(G)
  local own, ds = true, G.deciders
  if ds ~= nil then
    for j = 1, #ds do
      local it = ds[j]
      if not it.lease then
        local C = it.C
        ws_checked(C.sum, C.fits)
        it.fits = it.cost <= it.limit and ws_le(C.sum, it.limit - it.cost)
      end
      if not it.fits then own = false end
    end
  end
  if G.seen then
    own = string.byte(G.seen, 1) == 49 -- '1'
    if not own then ws_refusedby(G, G.seen) end
  elseif not own then
    for j = 1, #ds do ds[j].refused = not ds[j].fits end
  end
  G.allowed = own
  return own
end

-- ws_refusal computes a refused group's retry: the earliest moment every
-- limit admits, or an acquire might. Reads only.
local function ws_refusal(G)
  local ds, any = G.deciders, false
  if ds == nil then return end
  for j = 1, #ds do any = any or ds[j].refused end
  if not any then return end
  local limits = G.limits or {} -- (acquires alone)
  for j = 1, #limits do
    local it = limits[j]
    it.S = ws_detail(it.L, it.key, it.C)
  end
  local retry = ws_groupretry(limits)
  for _, it in ipairs(ds) do
    if it.lease and it.refused then
      it.retry = ws_lretry(it, G.H.now)
      if it.retry < 0 or retry < 0 then retry = -1 else retry = math.max(retry, it.retry) end
    end
  end
  G.retry = retry
end

-- ws_answer answers an item that writes nothing now (a read, a late write, a
-- duplicate's item, a limit whose cost is not written), and if it is late.
local function ws_answer(G, it)
  local kind, L = it.kind, it.L
  if it.lease then return ws_lwrite(it, G.H, G.allowed, G.seen) end
  if kind == WS_IT_LIMIT then
    if it.S == nil then it.S = ws_detail(L, it.key, it.C) end
    local r = 0
    if it.refused then r = it.own or ws_retry(L, it.S, it.cost, it.limit) end
    return {it.C.sum, r, ws_reset(L, it.S), it.refused and 1 or 0}
  end
  local ans
  if kind == WS_IT_DISTINCT then
    ans = ws_dcount(L, it.K, L.now - L.w)
  elseif kind == WS_IT_EXTREME or kind == WS_IT_XREAD then
    ans = ws_xans(it.B ~= nil and 1 or 0, ws_xget(L, it.key, it.dir))
  elseif kind == WS_IT_QUIET then
    ans = 0
  elseif it.C ~= nil then
    ans = it.C.sum
  else
    ans = ws_sumover(L, it.key, L.w)
  end
  return ans, it.B == nil and kind ~= WS_IT_EXTREME
end

-- ws_check is the third stage: every write of the group under the event's
-- decision (G.event) is prepared and checked, every other item answered.
-- Reads only: after it, a commit cannot fail.
local function ws_check(G)
  local allowed, items = G.event, G.items
  for j = 1, #items do
    local it = items[j]
    local kind = it.kind
    if G.seen or it.B == nil or it.read then
      if not it.lease or G.seen then it.ans, it.late = ws_answer(G, it) end
    elseif kind == WS_IT_LIMIT or kind == WS_IT_IFOK or kind == WS_IT_COUNT then
      if kind == WS_IT_COUNT or (allowed and it.delta ~= '0') then
        it.d = it.delta
        ws_prepare(it.L, it.C, it.d, it.B)
        G.writes = true
        if kind == WS_IT_LIMIT and tonumber(it.C.nv) == 0 then
          -- The reset after the write is that of the other buckets: read now.
          it.S = ws_detail(it.L, it.key, it.C)
        end
      elseif kind == WS_IT_LIMIT then
        it.ans = ws_answer(G, it)
      else
        it.ans = it.C.sum
      end
    elseif kind == WS_IT_QUIET then
      it.Q, G.writes = ws_quiet(it.L, it.key, it.delta, it.B), true
    elseif kind == WS_IT_EXTREME then
      it.X, G.writes = ws_xprepare(it.L, it.key, it.dir, it.delta, G.e, it.B), true
    elseif kind == WS_IT_DISTINCT then
      it.P, G.writes, G.dw = ws_dplan(it.L, it.K, it.B), true, true
    end
  end
end

-- ws_record is the id's record of a group that wrote (see ws_refusedby).
local function ws_record(G, allowed)
  if allowed then
    if G.nonce ~= nil then
      return '1@' .. string.format('%d', G.H.now) .. '@' .. string.format('%d', ws_srvnow()) .. '#' .. G.nonce
    end
    return '1'
  end
  local rec, any = '0', false
  for j, it in ipairs(G.items) do
    if it.refused then rec, any = rec .. ',' .. j, true end
  end
  if not any then rec = '0,L' end
  return rec
end

-- ws_dwrites writes a group's distinct adds: the event's first writes.
local function ws_dwrites(G)
  local items = G.items
  for j = 1, #items do
    local it = items[j]
    if it.P ~= nil then ws_dwrite(it.L, it.K, it.B, it.P, it.members) end
  end
end

-- ws_commit_group is the last stage: write, keep the id, append the answer.
local function ws_commit_group(G, allowed, out)
  local flags = (allowed and 1 or 0) + (G.seen and 2 or 0) + (G.late and 4 or 0) + (G.own and 16 or 0)
  local items, n = G.items, #out
  out[n + 1], out[n + 2], n = flags, G.retry, n + 2
  for j = 1, #items do
    local it = items[j]
    local kind, L, ans = it.kind, it.L, it.ans
    if ans ~= nil then
      -- answered by ws_check
    elseif it.lease then
      ans = ws_lwrite(it, G.H, allowed, nil)
      if ans[2] == 1 then G.wrote = true end
    elseif it.d ~= nil then
      local sum, v = ws_commit(L, it.key, it.C, it.B)
      ans = sum
      if kind == WS_IT_LIMIT then
        local reset = it.B.start + L.w - L.now
        if v == 0 then
          reset = 0
          for x = 1, it.S.live do
            local st = it.S.starts[x]
            if it.S.raw[x] ~= '0' and st ~= it.B.start and st + L.w - L.now > reset then reset = st + L.w - L.now end
          end
        end
        ans = {sum, 0, reset, 0}
      end
    elseif kind == WS_IT_EXTREME then
      ans = ws_xans(1, ws_xcommit(L, it.key, it.X, it.B))
    elseif kind == WS_IT_DISTINCT then
      ans = ws_dcount(L, it.K, L.now - L.w) -- (written first: ws_dwrites)
    else -- WS_IT_QUIET
      ws_quietcommit(L, it.key, it.Q, it.B)
      ans = 0
    end
    local s = it.late and -1 or 1
    if type(ans) ~= 'table' then
      out[n + 1], out[n + 2], n = s, ans, n + 2
    else
      out[n + 1] = s * #ans
      for x = 1, #ans do out[n + 1 + x] = ans[x] end
      n = n + 1 + #ans
    end
  end
  if G.writes then G.wrote = true end
  if G.idkey ~= nil and not G.seen and G.wrote then redis.call('SET', G.idkey, ws_record(G, allowed), 'PX', G.ttl) end
  if G.adopt ~= nil then redis.call('SET', G.idkey, G.adopt, 'KEEPTTL') end
  return out
end

-- ws_each runs fn(G, a) for each group, ws_gq naming the one running of
-- several, so that its error names it (ws_named).
local function ws_each(Gs, fn, a)
  if #Gs == 1 then return fn(Gs[1], a) end
  for q = 1, #Gs do
    ws_gq = q
    fn(Gs[q], a)
  end
  ws_gq = nil
end


-- ws_event runs an event's groups through the stages, appending their answers
-- to out; reserve (phase two) gives each group its own decision, check
-- (phase one) stops before the commit.
local function ws_event(Gs, reserve, check, out)
  ws_trace('event')
  ws_each(Gs, ws_place)
  ws_each(Gs, ws_decide)
  local all = true
  for _, G in ipairs(Gs) do all = all and G.allowed end
  for _, G in ipairs(Gs) do
    if reserve or check then G.event = G.allowed else G.event = all end
    if not G.event then G.allowed = false end
  end
  if not check then ws_each(Gs, ws_refusal) end
  ws_each(Gs, ws_check)
  if check then return nil end
  for q = 1, #Gs do
    if Gs[q].dw then ws_dwrites(Gs[q]) end
  end
  for q = 1, #Gs do ws_commit_group(Gs[q], Gs[q].event, out) end
  return out
end

-- ws_group runs one group, as ws_event does.
local function ws_group(G, out)
  ws_trace('event')
  ws_place(G)
  G.event = ws_decide(G)
  if G.deciders ~= nil then ws_refusal(G) end
  ws_check(G)
  if G.dw then ws_dwrites(G) end
  return ws_commit_group(G, G.event, out)
end

-- ws_reserved is the instant this reservation counted at; nil: not this one.
local function ws_reserved(G)
  local rec = G.idkey ~= nil and redis.call('GET', G.idkey)
  if not rec then return nil end
  local T, own = ws_pending(rec, G.nonce)
  return own and T or nil
end

-- ws_settle confirms a reservation of an event every group admitted: its
-- record becomes '1'. Answers 1, else 0 (not this reservation's).
local function ws_settle(G)
  if ws_reserved(G) == nil then return 0 end
  redis.call('SET', G.idkey, '1', 'KEEPTTL')
  return 1
end

-- ws_undo takes back what a reserved group counted at T because its limits
-- admitted (the costs, in their buckets while live; the leases acquired); its
-- id stays '0,L' after unconditional writes (they count whatever the decision).
local function ws_undo(G)
  local T = ws_reserved(G)
  if T == nil then return 0 end
  local undo, keep = {}, false
  for _, it in ipairs(G.items) do
    local kind = it.kind
    if (kind == WS_IT_LIMIT and it.cost > 0) or (kind == WS_IT_IFOK and it.delta ~= '0') then
      local B = ws_target(it.L, math.min(T, it.L.now)) -- (a clock that went back: the current bucket)
      if B ~= nil then
        it.B, it.d = B, '-' .. it.delta
        it.C = ws_open(it.L, it.key, B)
        ws_prepare(it.L, it.C, it.d, B)
        undo[#undo + 1] = it
      end
    elseif kind == WS_IT_ACQUIRE then
      undo[#undo + 1] = it
    elseif not (kind == WS_IT_READ or kind == WS_IT_XREAD or (kind == WS_IT_DISTINCT and #it.members == 0)) then
      keep = true
    end
  end
  for _, it in ipairs(undo) do
    if it.kind == WS_IT_ACQUIRE then redis.call('ZREM', it.key, it.id) else ws_commit(it.L, it.key, it.C, it.B) end
  end
  if keep then redis.call('SET', G.idkey, '0,L', 'KEEPTTL') else redis.call('DEL', G.idkey) end
  return 1
end

-- The Write script's operations (write.lua), defined once with the library:
-- each appends its values to out.
local function ws_one(H, kind, L, key, delta, limit)
  local G, it = ws_newgroup(H), ws_item(kind, L, key, delta)
  if kind == WS_IT_LIMIT then it.limit, it.cost = limit, ws_tonum(delta) end
  G.items[1] = it
  return G
end
local function ws_add(G, out) out[#out + 1] = ws_group(G, {})[4] end
local function ws_xadd(G, out) -- (the values after counted)
  for _, v in ipairs({unpack(ws_group(G, {}), 5)}) do out[#out + 1] = v end
end
local function ws_addquiet(G, out) out[#out + 1] = ws_group(G, {}) and 1 end
local function ws_allow(G, out)
  local r, n = ws_group(G, {}), #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = r[1] % 2, r[4], r[5], r[6]
end
local function ws_checkonly(G, out) ws_event({G}, false, true) out[#out + 1] = 1 end
local function ws_reserve(G, out) ws_event({G}, true, false, out) end
local function ws_link(Gs, out) ws_event(Gs, false, false, out) end
local function ws_undo1(G, out) out[#out + 1] = ws_undo(G) end
local function ws_settle1(G, out) out[#out + 1] = ws_settle(G) end
local function ws_paths(tag, out)
  for p, c in pairs(ws_traces[tag] or {}) do out[#out + 1], out[#out + 2] = p, c end
  ws_traces[tag] = nil
end
local function ws_dcount1(K, out, L, from) out[#out + 1] = ws_dcount(L, K, from) end

-- ws_op reads the operation at ARGV[i] and KEYS[k]: where the next one starts,
-- and the function to run with its arguments.
local function ws_op(H, i, k)
  local op = ARGV[i]
  if op == WS_OP_ADD or op == WS_OP_ADDNOSUM then
    local G = ws_one(H, op == WS_OP_ADD and WS_IT_COUNT or WS_IT_QUIET, ws_shape(H, ARGV[i + 1]), ws_ckey(k, 0), ARGV[i + 2])
    return i + 3, k + WS_KPC, op == WS_OP_ADD and ws_add or ws_addquiet, G
  elseif op == WS_OP_ALLOW then
    local G = ws_one(H, WS_IT_LIMIT, ws_shape(H, ARGV[i + 1]), ws_ckey(k, 0), ARGV[i + 3], ws_tonum(ARGV[i + 2]))
    return i + 4, k + WS_KPC, ws_allow, G
  elseif op == WS_OP_DADD then
    local L, m = ws_shape(H, ARGV[i + 1]), tonumber(ARGV[i + 2])
    local G = ws_one(H, WS_IT_DISTINCT, L, KEYS[k], nil)
    local nk
    G.items[1].members, G.items[1].K, nk = ws_args(i + 3, i + 2 + m), ws_dk(L, k)
    return i + 3 + m, nk, ws_add, G
  elseif op == WS_OP_XADD then
    local G = ws_one(H, WS_IT_EXTREME, ws_shape(H, ARGV[i + 1]), KEYS[k], ARGV[i + 3])
    G.items[1].dir = ARGV[i + 2]
    return i + 4, k + 1, ws_xadd, G
  elseif op == WS_OP_LIMITS then
    local P, G = ws_limits(H, ARGV[i + 1]), ws_newgroup(H)
    for x = 1, #P, 6 do
      local it = ws_item(WS_IT_LIMIT, ws_shape(H, P[x + 1]), ws_ckey(k, 0), P[x + 3])
      it.limit, it.cost, k = P[x + 2], P[x + 4], k + WS_KPC
      G.items[#G.items + 1] = it
    end
    return i + 2, k, ws_group, G
  elseif op == WS_OP_GROUP or op == WS_OP_CHECK then
    local ni, nk, G = ws_parse(H, i + 1, k)
    G.check = op == WS_OP_CHECK
    return ni, nk, op == WS_OP_GROUP and ws_group or ws_checkonly, G
  elseif op == WS_OP_RESERVE or op == WS_OP_UNDO or op == WS_OP_SETTLE then
    local ni, nk, G = ws_parse(H, i + 2, k)
    G.nonce = ARGV[i + 1]
    local fn = ws_reserve
    if op == WS_OP_UNDO then fn = ws_undo1 elseif op == WS_OP_SETTLE then fn = ws_settle1 end
    return ni, nk, fn, G
  elseif op == WS_OP_LINK then
    local Gs, ni, nk = {}, i + 2, k
    for j = 1, tonumber(ARGV[i + 1]) do ni, nk, Gs[j] = ws_parse(H, ni, nk) end
    return ni, nk, ws_link, Gs
  elseif op == WS_OP_PATHS then
    return i + 2, k, ws_paths, ARGV[i + 1]
  elseif op == WS_OP_DCOUNT then
    local L = ws_shape(H, ARGV[i + 1])
    local K, nk = ws_dk(L, k)
    return i + 3, nk, ws_dcount1, K, L, L.now - tonumber(ARGV[i + 2])
  end
  ws_err(WS_E.ARGS, 'unknown operation ' .. tostring(op))
end

-- ws_run runs the operation at ARGV[i] and KEYS[k], appending its values to
-- out (whose last entry is out[o]), on the backend's fast path (fast.lua) if
-- it takes it, else through the pipeline, then writes what it left for its
-- end (the plain hash's heads: ws_end): where the next operation starts.
local function ws_run(H, i, k, out, o)
  if ws_fast ~= nil then
    local ni, nk = ws_fast(H, i, k, out, o)
    if ni ~= nil then
      ws_end()
      return ni, nk
    end
  end
  local ni, nk, fn, a, b, c = ws_op(H, i, k)
  fn(a, out, b, c)
  ws_end()
  return ni, nk
end
