-- The field-TTL mode's write of a window extreme (see backend/lua/extreme.lua),
-- apart from its counters' writes, which never HSET.
--
-- ws_setx sets bucket B's field to v (a window extreme, see extreme.lua). HSET
-- clears a field's TTL, so every write sets it again, with the key's.
local function ws_setx(L, key, B, v, new)
  redis.call('HSET', key, B.field, v)
  ws_fieldexpire(L, key, B)
end
