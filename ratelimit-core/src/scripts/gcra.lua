-- One token-bucket decision, atomically, on the Redis server's clock (after prelude.lua, which
-- gives div_floor, div_ceil, int and `now` in microseconds).
--
-- The bucket is kept as GCRA's theoretical arrival time (TAT): the instant at which the
-- bucket is full again. It is split across the key's own expiry and its value:
--   * the key expires at E = ceil_ms(TAT) (PXAT), so a key lives exactly while its bucket is
--     not full and memory tracks active buckets only;
--   * the value is the sub-millisecond remainder r = E - TAT, an integer in "fine units" of
--     1/d microsecond. When d = 1 (every limit whose token interval is a whole number of
--     microseconds) the value is r itself, below 1000: an integer Redis shares and stores
--     with no allocation. Otherwise it is -(r * 10^10 + d): the fine unit travels with the
--     remainder, so a bucket written under one limit reads right under another.
-- Fine units make the emission interval an exact integer whatever the rate (3 per second is
-- 1_000_000 / 3 us), so no rounding ever accumulates; every product stays below 2^53 (the
-- limit is validated for that in Rust), so Lua's doubles compute it exactly.
--
-- The stored TAT may lie beyond what the current limit allows: the limit was lowered or
-- raised since it was written, or the server clock stepped back. The bucket is then read as
-- empty (x = tau), and that reading is written back even when the call is refused, so that
-- the retry_after the caller gets comes true: waiting it is admitted. A value this script
-- could not have written (another type, text, no expiry) is read as an empty bucket too and
-- overwritten: it costs that one key a refill, never an error for every key.
--
-- KEYS[1]  the bucket
-- ARGV[1]  interval: fine units one token takes to replenish
-- ARGV[2]  d: fine units per microsecond
-- ARGV[3]  tau: fine units to refill an empty bucket (burst * interval)
-- ARGV[4]  cost: tokens this call takes
-- ARGV[5]  absent (optional, default 0): fine units an absent bucket is from full, for an
--          initial fill below the burst ((burst - initial) * interval); a bucket is forgotten
--          once full, so one idle that long starts from there again
-- Returns {allowed (0|1), remaining tokens, retry_after us, reset_after us}.

local key = KEYS[1]
local interval = tonumber(ARGV[1])
local d = tonumber(ARGV[2])
local tau = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local absent = tonumber(ARGV[5] or '0') or 0

-- The stored remainder and its fine unit, or nil for a value this script never writes.
local function read_value(v)
  if type(v) ~= 'string' then return nil end
  if string.find(v, '^%d+$') then
    local r = tonumber(v)
    if r < 1000 then return r, 1 end
    return nil
  end
  -- -(r * 10^10 + d), read as decimal digits: Lua's doubles cannot hold the product.
  local digits = string.match(v, '^%-([1-9]%d*)$')
  if not digits or #digits > 23 then return nil end
  local r = 0
  if #digits > 10 then r = tonumber(string.sub(digits, 1, -11)) end
  local unit = tonumber(string.sub(digits, -10))
  if unit < 2 or r >= 1000 * unit then return nil end
  return r, unit
end

-- Written in canonical decimal (no leading zero), so Redis keeps it as an integer.
local function write_value(r)
  if d == 1 then return string.format('%d', r) end
  if r == 0 then return string.format('-%d', d) end
  return string.format('-%d%010d', r, d)
end

-- x: fine units until the bucket is full again (0 = full). stale: what is stored is not
-- what the current limit reads, so it is rewritten whatever the decision.
local x = absent
-- An absent bucket that is not full is stored even when refused: read again, it would not
-- have drained.
local stale = absent > 0
local got = redis.pcall('GET', key)
if got then
  local e = redis.call('PEXPIRETIME', key)
  stale = false
  local r, unit = nil, nil
  if type(got) == 'string' and e > 0 then r, unit = read_value(got) end
  if r == nil then
    x = tau
    stale = true
    redis.log(redis.LOG_WARNING, 'redis-ratelimit: a bucket key held a value it never writes; read as an empty bucket and overwritten')
  elseif unit == d then
    x = (e * 1000 - now) * d - r
  else
    -- Written under another fine unit: whole microseconds, rounded so the bucket reads at
    -- most a microsecond emptier, never fuller.
    x = (e * 1000 - now - div_floor(r, unit)) * d
    stale = true
  end
  if x < 0 then
    x = 0
  elseif x > tau then
    x = tau
    stale = true
  end
end

local function store(new_x)
  local reset = div_ceil(new_x, d)
  local expire_ms = div_ceil(now + reset, 1000)
  local remainder = (expire_ms * 1000 - now) * d - new_x
  redis.call('SET', key, write_value(remainder), 'PXAT', string.format('%d', expire_ms))
  return reset
end

local new_x = x + cost * interval
if new_x > tau then
  -- Denied: nothing is taken. Retry when x has drained to tau - cost * interval, rounded up
  -- to a whole microsecond so a caller who waits exactly that long is admitted.
  if stale then store(x) end
  local retry = div_ceil(new_x - tau, d)
  return {0, div_floor(tau - x, interval), retry, div_ceil(x, d)}
end

local reset = store(new_x)
return {1, div_floor(tau - new_x, interval), 0, reset}
