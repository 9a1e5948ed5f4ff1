-- Reading a whole counter: every operation of the backends whose buckets
-- expire on their own, and the plain hash's when its running total cannot.

-- ws_scan classifies the fields of ws_read's flat reply (a field neither a
-- bucket code nor reserved, WS_RESERVED, raises WS_E.NOTCOUNTER). S: sum and
-- mag, the sum of the live values that start after lthr and of their
-- magnitudes (exact when mag < 2^53); live, their number; stale, the fields
-- that left; with keep, starts, raw, vals and kmag, every live bucket's start,
-- value as stored and as a double, and their magnitudes' sum.
local function ws_scan(L, all, lthr, keep)
  local sum, mag, nlive, nstale, stale = 0, 0, 0, 0, {}
  local starts, raw, vals, kmag
  if keep then starts, raw, vals, kmag = {}, {}, {}, 0 end
  for i = 1, #all, 2 do
    local f = all[i]
    local k = tonumber(f)
    if k ~= nil or not WS_RESERVED[f] then
      local s = ws_fstart(L, f, k)
      if s == nil then
        nstale = nstale + 1
        stale[nstale] = f
      else
        local v = tonumber(all[i + 1])
        if v == nil then ws_err(WS_E.NOTCOUNTER, 'a hash whose values are not all integers') end
        nlive = nlive + 1
        local a = v < 0 and -v or v
        if keep then
          starts[nlive], raw[nlive], vals[nlive] = s, all[i + 1], v
          kmag = kmag + a
        end
        if s > lthr then
          sum = sum + v
          mag = mag + a
        end
      end
    end
  end
  return {sum = sum, mag = mag, live = nlive, stale = stale,
          starts = starts, raw = raw, vals = vals, kmag = kmag}
end

-- ws_exactsum adds delta (a decimal string, or nil) and the live values whose
-- bucket starts after lthr, exactly. It returns the sum as ws_num leaves it,
-- and whether it is within int64.
local function ws_exactsum(L, all, lthr, delta)
  local hi, lo = 0, 0
  if delta ~= nil then hi, lo = ws_split(delta) end
  for i = 1, #all, 2 do
    local k = tonumber(all[i])
    if k ~= nil then
      local s = ws_start(L, k)
      if s ~= nil and s > lthr then
        local h, l = ws_split(all[i + 1])
        hi, lo = hi + h, lo + l
      end
    end
  end
  return ws_num(hi, lo), ws_fits(hi, lo)
end

-- ws_scansum is the sum of the buckets after lthr, exactly, and whether it is
-- within int64 (a bucket of the other sign leaving may take it out).
local function ws_scansum(L, all, S, lthr)
  if S.mag < WS_BIG then return S.sum, true end
  return ws_exactsum(L, all, lthr, nil)
end

-- ws_checked raises WS_E.OVERFLOW for a sum that is not within int64.
local function ws_checked(sum, ok)
  if not ok then ws_err(WS_E.OVERFLOW, 'the window sum ' .. sum .. ' leaves the int64 range') end
  return sum
end

-- ws_scanread is the read-only sum over a lookback.
local function ws_scanread(L, key, lb)
  local all = ws_read(key, L)
  local S = ws_scan(L, all, L.now - lb, false)
  return ws_checked(ws_scansum(L, all, S, L.now - lb))
end
