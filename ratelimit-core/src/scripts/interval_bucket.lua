-- One token-bucket decision with interval refill, atomically, on the Redis server's clock
-- (after prelude.lua).
--
-- A bucket of `burst` tokens to which all `replenish` tokens are added at once at every
-- multiple of the period on the server clock (seed 001's interval refill). The bucket is kept
-- as the refill instant F at which it is full again and the slack s of that last refill
-- (tokens it adds beyond full, 0 <= s < replenish): before F, the bucket lacks
-- debt = m x replenish - s tokens, m the refills due in (now, F]. As in gcra.lua, F is the
-- key's expiry (PXAT, rounded up to the millisecond; F is the last multiple of the period at
-- or before it, the period being a millisecond or more) and the value is s alone: a key lives
-- exactly while its bucket is not full.
--
-- A bucket Redis does not hold starts with `initial` tokens (Bucket4j's initial tokens;
-- `initial = burst` by default): a bucket is forgotten a millisecond after it is full, so a
-- bucket idle that long starts with `initial` again. A bucket that lacks more than the burst (the
-- limit was lowered, the clock stepped back) or was written under another replenish reads
-- as empty; such a reading, and an absent bucket that is not full, is stored even when the
-- call is refused, so that the refusal's retry_after comes true.
--
-- KEYS[1]  the bucket
-- ARGV[1]  replenish: tokens added at each refill
-- ARGV[2]  burst: the bucket's capacity
-- ARGV[3]  period between refills, microseconds
-- ARGV[4]  initial: tokens of an absent bucket
-- ARGV[5]  cost: tokens this call takes
-- Returns {allowed (0|1), remaining, retry_after us, reset_after us, now us}.

local key = KEYS[1]
local replenish = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local initial = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])

local next_refill = (div_floor(now, period) + 1) * period

local debt = burst - initial
local stale = debt > 0
local got = redis.pcall('GET', key)
if type(got) == 'string' then
  local e = redis.call('PEXPIRETIME', key)
  local full_at = div_floor(e * 1000, period) * period
  local slack = nil
  if string.find(got, '^%d+$') and e > 0 then slack = tonumber(got) end
  if slack == nil then
    debt, stale = burst, true
  elseif full_at <= now then
    -- Full. Redis keeps a key at least until the end of its expiry's millisecond (it expires
    -- keys on a millisecond clock read when the script starts, before TIME): until then the
    -- bucket reads full, so a refusal's wait that ends at F comes true; after it, as absent
    -- whether or not Redis has dropped it yet.
    if now < (e + 1) * 1000 then debt, stale = 0, false end
  else
    local due = div_floor(full_at, period) - div_floor(now, period)
    if slack >= replenish or due > burst + 1 then
      debt, stale = burst, true
    else
      debt = math.max(due * replenish - slack, 0)
      stale = false
      if debt > burst then debt, stale = burst, true end
    end
  end
elseif got ~= false then
  debt, stale = burst, true
end

-- When the bucket lacking `d` tokens is full again, and what is stored for it.
local function full_again(d)
  return next_refill + (div_ceil(d, replenish) - 1) * period
end
local function store(d)
  local full_at = full_again(d)
  local slack = div_ceil(d, replenish) * replenish - d
  redis.call('SET', key, int(slack), 'PXAT', int(div_ceil(full_at, 1000)))
end
local function reset_after(d)
  if d == 0 then return 0 end
  return full_again(d) - now
end

if debt + cost > burst then
  if stale then store(debt) end
  local refills = div_ceil(debt + cost - burst, replenish)
  local retry = next_refill + (refills - 1) * period - now
  return {0, burst - debt, retry, reset_after(debt), now}
end
-- (floored at full: a negative cost gives tokens back, see multi.lua)
debt = math.max(debt + cost, 0)
store(debt)
return {1, burst - debt, 0, reset_after(debt), now}
