-- One fixed-window decision, atomically, on the Redis server's clock (after prelude.lua).
--
-- Windows are aligned to multiples of the period on the server clock (seed 001's INCR +
-- EXPIRE counter). The key holds the window's count as an integer, and expires at the
-- window's end (PXAT, rounded up to the millisecond): that expiry also says which window the
-- count belongs to, so a key Redis has not dropped yet reads as absent once its window is
-- over. Known weakness, by definition: 2 x limit calls may pass within one period, across a
-- window boundary.
--
-- Or windows that are calendar periods (weeks, months), which end where fixed_window_head.lua
-- says (`window_end`); the state is the same.
--
-- KEYS[1]  the counter
-- ARGV[1]  limit: tokens per window
-- ARGV[2]  period: the window's length, microseconds (a calendar's: its longest window)
-- ARGV[3..5] (optional) the calendar: its period, anchor and offset (fixed_window_head.lua)
-- ARGV[#ARGV]  cost: tokens this call takes
-- Returns {allowed (0|1), remaining, retry_after us, reset_after us, now us}.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local cost_text = ARGV[#ARGV]
local cost = tonumber(cost_text)

local stop = window_end(now, ARGV)
local expire_ms = div_ceil(stop, 1000)
local left = stop - now

local count = fw_count(redis, key, expire_ms)

if count + cost > limit then
  -- The next window starts empty and `cost <= limit`: it admits this call.
  return {0, math.max(limit - count, 0), left, left, now}
end
if count > 0 then
  -- The argument's own text: a Lua number would be written out again (prelude.lua).
  redis.call('INCRBY', key, cost_text)
else
  redis.call('SET', key, int(cost), 'PXAT', int(expire_ms))
end
return {1, limit - count - cost, 0, left, now}
