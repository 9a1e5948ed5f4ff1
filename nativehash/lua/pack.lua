-- ws_pack and ws_unpack pack and unpack doubles, little-endian, as the struct
-- library does for '<' and a 'd' per number (the plain hash's heads). They
-- are the server's struct library, or, on a server without it (the demo's
-- embedded miniredis), the same bytes made in Lua. The first call chooses
-- (ws_packing): at FUNCTION LOAD the struct library is not in sight.
local ws_pack, ws_unpack = nil, nil

local function ws_packing()
  local ok, S = pcall(function() return struct end)
  if ok and type(S) == 'table' and S.pack ~= nil then
    ws_pack, ws_unpack = S.pack, S.unpack
  else
    local floor, frexp, ldexp, char, byte = math.floor, math.frexp, math.ldexp, string.char, string.byte
    local M52, INF = 4503599627370496, 1 / 0 -- 2^52; (gopher-lua's math.huge is the largest double)
    ws_pack = function(fmt, ...)
      local v, out = {...}, {}
      for k = 1, #fmt - 1 do
        local x, sign, e, mant = v[k], 0, 0, 0
        if x < 0 or (x == 0 and 1 / x < 0) then sign, x = 128, -x end
        if x == INF then
          e = 2047
        elseif x > 0 then
          local m, ex = frexp(x) -- x = m * 2^ex, 0.5 <= m < 1
          e = ex + 1022
          if e <= 0 then
            mant, e = ldexp(m, ex + 1074), 0 -- subnormal
          else
            mant = (m * 2 - 1) * M52
          end
        end
        local b = {}
        for j = 1, 6 do
          b[j] = mant % 256
          mant = (mant - b[j]) / 256
        end
        out[k] = char(b[1], b[2], b[3], b[4], b[5], b[6], (e % 16) * 16 + mant, sign + floor(e / 16))
      end
      return table.concat(out)
    end
    ws_unpack = function(fmt, s, pos)
      pos = pos or 1
      local n, out = #fmt - 1, {}
      for k = 1, n do
        local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, pos, pos + 7)
        local e = (b8 % 128) * 16 + floor(b7 / 16)
        local mant = (((b7 % 16) * 256 + b6) * 256 + b5) * 4294967296 + ((b4 * 256 + b3) * 256 + b2) * 256 + b1
        local x
        if e == 0 then
          x = ldexp(mant, -1074)
        elseif e == 2047 then
          x = INF
        else
          x = ldexp(mant + M52, e - 1075)
        end
        if b8 >= 128 then x = -x end
        out[k] = x
        pos = pos + 8
      end
      out[n + 1] = pos
      return unpack(out, 1, n + 1)
    end
  end
end

ws_pack = function(...)
  ws_packing()
  return ws_pack(...)
end

ws_unpack = function(...)
  ws_packing()
  return ws_unpack(...)
end
