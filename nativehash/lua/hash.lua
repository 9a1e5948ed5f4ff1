-- Native hash primitives that both modes share: one hash per counter, one
-- field per bucket.

local function ws_read(key) return redis.call('HGETALL', key) end

local function ws_drop(key, fields)
  ws_chunks(fields, function(...) redis.call('HDEL', key, ...) end)
end
