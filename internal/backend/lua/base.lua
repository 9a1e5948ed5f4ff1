-- The error style, the clock and small helpers shared by every windowstore
-- script, here and in package limit.
--
--   ws_err(code, msg)  raises "CODE windowstore: msg" as an error reply
--   ws_srvnow()        the server's clock (TIME), Unix ms
--   ws_clock(arg)      the script's instant: arg as Unix ms, or the server's
--                      clock for ""; and the server's clock when it was read

local function ws_err(code, msg) error(redis.error_reply(code .. ' windowstore: ' .. msg)) end

local function ws_srvnow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ws_clock(arg)
  if arg ~= '' then return tonumber(arg), nil end
  local now = ws_srvnow()
  return now, now
end

-- ws_tonum is tonumber of an argument that repeats from one operation to the
-- next (a cost, a limit, how many items follow), remembered: a lookup costs
-- less than strtod. It keeps at most 256 strings, from one call to the next.
local ws_tonum = nil
do
  local memo, n = {}, 0
  ws_tonum = function(s)
    local x = memo[s]
    if x ~= nil then return x end
    x = tonumber(s)
    if x ~= nil then
      if n >= 256 then memo, n = {}, 0 end
      memo[s], n = x, n + 1
    end
    return x
  end
end

-- ws_chunks calls fn with the items of list in slices small enough to unpack.
local function ws_chunks(list, fn)
  for i = 1, #list, 1000 do fn(unpack(list, i, math.min(i + 999, #list))) end
end

-- ws_args is ARGV[i] .. ARGV[j] as a list (unpack of some 8,000 values or
-- more fails: "too many results to unpack").
local function ws_args(i, j)
  local t = {}
  for x = i, j do t[#t + 1] = ARGV[x] end
  return t
end

-- ws_errmsg is the message of an error that pcall caught: Redis 7.0 hands
-- over a string ("WRONGTYPE ..."), later servers a table {err = ...}.
local function ws_errmsg(e)
  if type(e) == 'table' and e.err then return e.err end
  return tostring(e)
end

-- ws_result turns what pcall returned into one entry of a batch's reply: the
-- value, or an error reply that keeps the error's code (WRONGTYPE, OOM, WS...).
local function ws_result(ok, r)
  if ok then return r end
  -- A Lua error carries its place ("user_script:12: "); the code is after it.
  local msg = string.gsub(ws_errmsg(r), '^@?[%w_]*:%d+: ', '')
  if not string.find(msg, '^[A-Z][A-Z_]* ') then msg = 'ERR windowstore: ' .. msg end
  return redis.error_reply(msg)
end

-- ws_gq is the group of several an operation is running (nil: none, or
-- one), and ws_named error e of the operation, naming that group.
local ws_gq = nil
local function ws_named(e)
  if ws_gq == nil then return e end
  local code, rest = string.match(ws_result(false, e).err, '^(%S+) (.*)$')
  e, ws_gq = redis.error_reply(code .. ' windowstore: group ' .. ws_gq .. ': ' .. string.gsub(rest, '^windowstore: ', '')), nil
  return e
end

-- Tracing, for the tests (backend.Trace): a header's trace, when not '', is
-- a mode ('g': the pipeline alone; 't': any path) and a tag, under
-- which the paths operations take are counted from call to call (Redis
-- Functions only); WS_OP_PATHS tag answers and forgets them.
local ws_tracing, ws_traces = nil, {}

local function ws_tracefrom(arg)
  if arg == '' then
    ws_tracing = nil
    return
  end
  local tag = string.sub(arg, 2)
  ws_tracing = {general = string.sub(arg, 1, 1) == 'g', tag = tag}
  if ws_traces[tag] == nil then ws_traces[tag] = {} end
end

-- ws_trace counts n operations (one, if n is nil) that took path.
local function ws_trace(path, n)
  if ws_tracing == nil then return end
  local t = ws_traces[ws_tracing.tag]
  t[path] = (t[path] or 0) + (n or 1)
end
