-- One sliding-log decision, atomically, on the Redis server's clock (after prelude.lua).
--
-- Exact (seed 003's sorted set): a sorted set of the tokens admitted within the last period,
-- one member per token, scored by its admission time in microseconds; members are
-- "<time>:<n>", n past the count of live tokens, so that equal times and costs above 1 never
-- collide. A token admitted at t counts while now - period < t. A call passes iff live tokens
-- + cost <= limit; refused, it waits until the oldest tokens it needs gone have left.
-- Memory is bounded by the limit per key (each member about 30 bytes), plus tokens admitted
-- under a higher limit until they leave. Refusals write nothing: expired members are removed
-- only when a call is admitted. The key expires when its newest token leaves.
--
-- KEYS[1]  the log
-- ARGV[1]  limit: tokens per period
-- ARGV[2]  period, microseconds
-- ARGV[3]  cost: tokens this call takes
-- Returns {allowed (0|1), remaining, retry_after us, reset_after us, now us}.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])

-- A value this script never writes is dropped: it costs that key its log, never an error.
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then
  redis.log(redis.LOG_WARNING, 'redis-ratelimit: a sliding-log key held another type; dropped')
  redis.call('DEL', key)
end

local live_from = '(' .. int(now - period)
local live = redis.call('ZCOUNT', key, live_from, '+inf')

local function newest()
  local last = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  return tonumber(last[2])
end

if live + cost > limit then
  -- The (live + cost - limit)-th oldest live token must leave: then limit - cost remain.
  local nth = redis.call('ZRANGE', key, live_from, '+inf', 'BYSCORE', 'LIMIT', live + cost - limit - 1, 1, 'WITHSCORES')
  local leaves = tonumber(nth[2]) + period
  return {0, math.max(limit - live, 0), leaves - now, newest() + period - now, now}
end

-- Read before any write: run beside other limits (multi.lua), the writes wait until every
-- limit has decided. The newest token is then this call's, or a later one if the clock
-- stepped back (an empty log has none: nil).
local before = newest()
redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - period))
-- At most 1000 members per ZADD, to stay within Lua's stack.
local i = 0
while i < cost do
  local batch = {}
  for j = i + 1, math.min(cost, i + 1000) do
    batch[#batch + 1] = int(now)
    batch[#batch + 1] = int(now) .. ':' .. int(live + j)
  end
  redis.call('ZADD', key, unpack(batch))
  i = i + 1000
end
local last = math.max(before or now, now)
-- A call of no tokens (a peek of multi.lua) adds none: the newest live token's, as before.
if cost == 0 and before and before > now - period then last = before end
redis.call('PEXPIREAT', key, int(div_ceil(last + period, 1000)))
return {1, limit - live - cost, 0, last + period - now, now}
