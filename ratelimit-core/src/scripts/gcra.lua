-- One token-bucket decision, atomically, on the Redis server's clock.
--
-- The bucket is kept as GCRA's theoretical arrival time (TAT): the instant at which the
-- bucket is full again. It is split across the key's own expiry and its value:
--   * the key expires at E = ceil_ms(TAT) (PXAT), so a key lives exactly while its bucket is
--     not full and memory tracks active buckets only;
--   * the value is the sub-millisecond remainder E - TAT, an integer in "fine units" of
--     1/d microsecond, which Redis stores int-encoded (no string allocation).
-- Fine units make the emission interval an exact integer whatever the rate (3 per second is
-- 1_000_000 / 3 us), so no rounding ever accumulates; every product stays below 2^53 (the
-- limit is validated for that in Rust), so Lua's doubles compute it exactly.
--
-- KEYS[1]  the bucket
-- ARGV[1]  interval: fine units one token takes to replenish
-- ARGV[2]  d: fine units per microsecond
-- ARGV[3]  tau: fine units to refill an empty bucket (burst * interval)
-- ARGV[4]  cost: tokens this call takes
-- Returns {allowed (0|1), remaining tokens, retry_after us, reset_after us}.

local key = KEYS[1]
local interval = tonumber(ARGV[1])
local d = tonumber(ARGV[2])
local tau = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

-- Exact integer division of non-negative integers below 2^53 (the correction steps absorb
-- any rounding of the double quotient).
local function div_floor(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function div_ceil(a, b)
  local q = div_floor(a, b)
  if q * b < a then q = q + 1 end
  return q
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- x: fine units until the bucket is full again (0 = full).
local x = 0
local off = redis.call('GET', key)
if off then
  local e = redis.call('PEXPIRETIME', key)
  if e > 0 then
    x = (e * 1000 - now) * d - tonumber(off)
    -- A clock stepped back, or a stale value, must not make the bucket emptier than empty.
    if x < 0 then x = 0 elseif x > tau then x = tau end
  end
end

local new_x = x + cost * interval
if new_x > tau then
  -- Denied: nothing is written. Retry when x has drained to tau - cost * interval,
  -- rounded up to a whole microsecond so a caller who waits exactly that long is admitted.
  local retry = div_ceil(new_x - tau, d)
  return {0, div_floor(tau - x, interval), retry, div_ceil(x, d)}
end

local reset = div_ceil(new_x, d)
local expire_ms = div_ceil(now + reset, 1000)
local remainder = (expire_ms * 1000 - now) * d - new_x
redis.call('SET', key, string.format('%d', remainder), 'PXAT', string.format('%d', expire_ms))
return {1, div_floor(tau - new_x, interval), 0, reset}
