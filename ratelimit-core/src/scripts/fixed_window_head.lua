-- The fixed window's helpers (after prelude.lua), defined once ahead of every script that
-- runs it: the count a key holds for a window, and where its windows end (the twins of
-- ratelimit-algorithms' `fixed_window::window_count` and `window_end`, and `calendar.rs`, whose
-- comments say the rules). fixed_window.lua and call.lua's settlement share them.
--
-- The count `key` holds for the window that expires at `expire_ms`: 0 for another type, text,
-- no expiry or another window's expiry (not this window's count).
local function fw_count(redis, key, expire_ms)
  local got = redis.pcall('GET', key)
  if type(got) == 'string' and string.find(got, '^[1-9]%d*$')
      and redis.call('PEXPIRETIME', key) == expire_ms then
    return tonumber(got)
  end
  return 0
end

-- A window's arguments are {limit, period, cost}, or {limit, period, calendar period (1 a
-- week, 2 a month), anchor (the first weekday, 1 Monday to 7 Sunday; the day of the month,
-- 1 to 31), offset (minutes east of UTC, plus 840), cost} for windows that are calendar
-- periods. The end (us) of the window holding the instant `at` (us):
local function window_end(at, args)
  if #args < 6 then
    local period = tonumber(args[2])
    return (div_floor(at, period) + 1) * period
  end
  local kind, anchor = tonumber(args[3]), tonumber(args[4])
  local shift = (tonumber(args[5]) - 840) * 60000000
  local DAY = 86400000000
  local day = div_floor(at + shift, DAY)
  local last
  if kind == 1 then
    -- 1970-01-01 was a Thursday (ISO weekday 4); Lua's % is a floor modulo.
    local weekday = (day + 3) % 7 + 1
    last = day - (weekday - anchor) % 7 + 7
  else
    -- Howard Hinnant's civil_from_days and days_from_civil (days since 1970-01-01).
    local z = day + 719468
    local era = div_floor(z, 146097)
    local doe = z - era * 146097
    local yoe = div_floor(doe - div_floor(doe, 1460) + div_floor(doe, 36524)
      - div_floor(doe, 146096), 365)
    local doy = doe - (365 * yoe + div_floor(yoe, 4) - div_floor(yoe, 100))
    local mp = div_floor(5 * doy + 2, 153)
    local d = doy - div_floor(153 * mp + 2, 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    local y = yoe + era * 400
    if m <= 2 then y = y + 1 end
    -- The anchor day in month m of year y, or the month's last day if it has fewer.
    local function anchor_in(y, m)
      local days = 31
      if m == 2 then
        days = 28
        if y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) then days = 29 end
      elseif m == 4 or m == 6 or m == 9 or m == 11 then
        days = 30
      end
      return math.min(anchor, days)
    end
    -- The window ends on the next anchor: this month's, if not reached yet, else the next
    -- month's.
    if d >= anchor_in(y, m) then
      m = m + 1
      if m == 13 then m, y = 1, y + 1 end
    end
    local dd = anchor_in(y, m)
    if m <= 2 then y = y - 1 end
    era = div_floor(y, 400)
    yoe = y - era * 400
    if m > 2 then mp = m - 3 else mp = m + 9 end
    doy = div_floor(153 * mp + 2, 5) + dd - 1
    doe = yoe * 365 + div_floor(yoe, 4) - div_floor(yoe, 100) + doy
    last = era * 146097 + doe - 719468
  end
  return last * DAY - shift
end
