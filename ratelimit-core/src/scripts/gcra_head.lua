-- The token bucket's helpers (what gcra.lua calls per decision), after prelude.lua: defined
-- once per script run, and once per library load rather than once per call. Each takes what
-- it reads as arguments: the limit's interval, fine unit d, tau and hold, the server time
-- `now`, and the `redis` to write with (multi.lua's defers writes).

-- The stored remainder, fine unit and interval, or nil for a value this script never writes.
local function tb_read(v)
  if type(v) ~= 'string' then return nil end
  if string.find(v, '^[1-9]%d*$') then
    local n = #v
    if n < 4 or n > 19 then return nil end
    if n <= 15 then
      -- Below 10^15, so exact in a double: the two parts by arithmetic, not by substrings.
      local all = tonumber(v)
      local iv = math.floor(all / 1000)
      return all - iv * 1000, 1, iv
    end
    return tonumber(string.sub(v, -3)), 1, tonumber(string.sub(v, 1, -4))
  end
  local digits = string.match(v, '^%-([1-9]%d*)$')
  if not digits then return nil end
  local k = tonumber(string.sub(digits, -1)) + 1
  local n = #digits
  if n < 2 * k + 5 or n > 2 * k + 20 then return nil end
  local unit_digits = string.sub(digits, -1 - k, -2)
  if string.sub(unit_digits, 1, 1) == '0' then return nil end
  local unit = tonumber(unit_digits)
  local r = tonumber(string.sub(digits, -4 - 2 * k, -2 - k))
  local iv = tonumber(string.sub(digits, 1, -5 - 2 * k))
  if unit < 2 or r >= 1000 * unit then return nil end
  return r, unit, iv
end

-- Written in canonical decimal (no leading zero), so Redis keeps it as an integer.
local function tb_write(r, d, interval)
  if d == 1 then
    -- interval and r's three digits: one number while it is exact (the same text).
    if interval < 1000000000000 then return string.format('%d', interval * 1000 + r) end
    return string.format('%d%03d', interval, r)
  end
  local unit = string.format('%d', d)
  local k = #unit
  return string.format('-%d%0' .. (k + 3) .. 'd%s%d', interval, r, unit, k - 1)
end

-- What a bucket owing `owed` fine units of `unit` at `iv` per token owes under this limit,
-- rounded towards empty (token_bucket.rs's `convert`, operation for operation): the same tokens at
-- this limit's interval, the fraction of one in doubles plus one fine unit for their
-- rounding. Tokens beyond the burst (reservations, a lower burst) stay owed up to `hold`;
-- more than that, or anything beyond what a limit could write (2^52, a clock stepped back),
-- is empty.
local function tb_convert(owed, iv, tau, hold, interval)
  if owed > 4503599627370496 or iv < 1 then return tau end
  local tokens = div_floor(owed, iv)
  if tokens >= div_floor(tau + hold, interval) then return tau end
  local rest = owed - tokens * iv
  local fraction = 0
  if rest > 0 then fraction = math.min(math.ceil(rest / iv * interval) + 1, interval) end
  return tokens * interval + fraction
end

-- Stores `new_x` (fine units until the bucket is full) as the key's expiry and value, and
-- returns the microseconds until it is full.
local function tb_store(redis, key, new_x, d, interval, now)
  local reset = div_ceil(new_x, d)
  local expire_ms = div_ceil(now + reset, 1000)
  local remainder = (expire_ms * 1000 - now) * d - new_x
  redis.call('SET', key, tb_write(remainder, d, interval), 'PXAT', string.format('%d', expire_ms))
  return reset
end

-- The limit's numbers from gcra.lua's arguments (see its header): interval, d, tau, absent,
-- reach, queue and hold (by default what ratelimit-vocab's `limits::hold_for` computes).
local function tb_params(args)
  local interval = tonumber(args[1])
  local d = tonumber(args[2])
  local tau = tonumber(args[3])
  -- The optional ones read only when sent (most calls send four).
  local absent, reach, queue, hold = 0, 0, false, nil
  if args[5] then
    absent = tonumber(args[5]) or 0
    reach = tonumber(args[6] or '0') or 0
    queue = args[8] == '1'
    hold = tonumber(args[7] or '')
  end
  if not hold then
    hold = math.max(2251799813685248 - 2 * tau - 2048 * d, 0)
    hold = math.min(86400000000 * d, hold)
  end
  return interval, d, tau, absent, reach, queue, hold
end

-- x, the fine units until the bucket at `key` is full again at `now` (0: full), as this limit
-- reads it, and whether what is stored is not what it reads (to be rewritten whatever the
-- decision): see gcra.lua's header.
local function tb_owed(redis, key, now, tau, hold, absent, d, interval)
  local x = absent
  -- An absent bucket that is not full is stored even when refused: read again, it would not
  -- have drained.
  local stale = absent > 0
  local got = redis.pcall('GET', key)
  if got then
    local e = redis.call('PEXPIRETIME', key)
    stale = false
    local r, unit, iv = nil, nil, nil
    if type(got) == 'string' and e > 0 then r, unit, iv = tb_read(got) end
    if r == nil then
      x = tau
      stale = true
      redis.log(redis.LOG_WARNING, 'redis-ratelimit: a bucket key held a value it never writes; read as an empty bucket and overwritten')
    else
      x = (e * 1000 - now) * unit - r
      if x <= 0 then
        -- Full: an ended state reads as an absent one, whether or not Redis dropped it yet.
        x = absent
        stale = absent > 0
      elseif unit ~= d or iv ~= interval then
        x = tb_convert(x, iv, tau, hold, interval)
        stale = true
      end
    end
    if x > tau + hold then
      x = tau
      stale = true
    end
  end
  return x, stale
end
