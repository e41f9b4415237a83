-- One token-bucket decision, atomically, on the Redis server's clock (after prelude.lua, which
-- gives div_floor, div_ceil, int and `now` in microseconds, and gcra_head.lua, which gives
-- tb_params, tb_owed, tb_read, tb_write, tb_convert and tb_store).
--
-- The bucket is kept as GCRA's theoretical arrival time (TAT): the instant at which the
-- bucket is full again. It is split across the key's own expiry and its value:
--   * the key expires at E = ceil_ms(TAT) (PXAT), so a key lives exactly while its bucket is
--     not full and memory tracks active buckets only;
--   * the value is the sub-millisecond remainder r = E - TAT, an integer in "fine units" of
--     1/d microsecond, with the limit it was written under: its interval (fine units per
--     token) and d. When d = 1 (every limit whose token interval is a whole number of
--     microseconds) the value is interval * 1000 + r. Otherwise it is the negative integer
--     whose digits are the interval, r in k + 3 digits, d in its k digits, then k - 1.
--     Either is an integer Redis stores in the key's object, with no allocation, when it fits
--     in 64 bits (every usual limit); a larger one is stored as a short string.
-- Fine units make the emission interval an exact integer whatever the rate (3 per second is
-- 1_000_000 / 3 us), so no rounding ever accumulates; every product stays below 2^53 (the
-- limit is validated for that in Rust), so Lua's doubles compute it exactly.
--
-- Read under another limit (another interval or fine unit), a bucket owes the tokens it
-- owed: its debt in tokens of the old interval becomes the same tokens at the new one, the
-- fraction of a token rounded towards empty, and is stored again in the new limit's terms
-- even when the call is refused; tokens reserved beyond the burst are carried over too (up to
-- `hold`), so waiters of the old rate keep their turns and new calls come after them.
--
-- A call over the limit may reserve (a wait, or a leaky bucket's queue): when its tokens are
-- due within `reach`, it is admitted at once, its tokens taken ahead (x goes beyond tau), and
-- its retry_after says how long it must wait before it goes. A bucket may so owe more than
-- tau: reservations, or a lower burst, or a clock stepped back. It is honest as it stands (a
-- refusal's retry_after counts every token owed) up to `hold` beyond tau; a bucket owing more
-- than that cannot hold reservations, only a clock stepped far back: it is read as empty
-- (x = tau), and that reading is written back even when the call is refused, so that the
-- retry_after the caller gets comes true. A value this script could not have written
-- (another type, text, no expiry) is read as an empty bucket too and overwritten: it costs
-- that one key a refill, never an error for every key.
--
-- KEYS[1]  the bucket
-- ARGV[1]  interval: fine units one token takes to replenish
-- ARGV[2]  d: fine units per microsecond
-- ARGV[3]  tau: fine units to refill an empty bucket (burst * interval)
-- ARGV[4]  cost: tokens this call takes (negative: tokens given back, floored at full)
-- ARGV[5]  absent (optional, default 0): fine units an absent bucket is from full, for an
--          initial fill below the burst ((burst - initial) * interval); a bucket is forgotten
--          once full, so one idle that long starts from there again
-- ARGV[6]  reach (optional, default 0): fine units beyond tau this call may reserve
-- ARGV[7]  hold (optional): fine units beyond tau any call on this bucket may reserve (the
--          same for every call on it); by default a day's worth, or what exact arithmetic
--          leaves (2 * tau + 2048 * d + hold below 2^51), as ratelimit-vocab's `limits::hold_for`
-- ARGV[8]  queue (optional, default 0): 1 for a leaky bucket, whose remaining counts the free
--          places in its queue (tau + reach); otherwise the whole tokens left of tau
-- Returns {allowed (0|1), remaining tokens, retry_after us, reset_after us, the server time
-- it decided at (us, for the differential tests)}.

local key = KEYS[1]
local interval, d, tau, absent, reach, queue, hold = tb_params(ARGV)
local cost = tonumber(ARGV[4])
local x, stale = tb_owed(redis, key, now, tau, hold, absent, d, interval)

local new_x = x + cost * interval
local room = tau + reach
-- What `remaining` counts whole tokens of: the bucket, or a leaky bucket's queue.
local full = tau
if queue then full = room end
-- Tokens given back (a negative cost) always go back, also into a bucket that still owes
-- beyond `room` after them: only a call that takes can be refused.
if cost >= 0 and new_x > room then
  -- Denied: nothing is taken. Retry when x has drained to room - cost * interval, rounded up
  -- to a whole microsecond so a caller who waits exactly that long is admitted.
  if stale then tb_store(redis, key, x, d, interval, now) end
  local retry = div_ceil(new_x - room, d)
  return {0, div_floor(math.max(full - x, 0), interval), retry, div_ceil(x, d), now}
end

local reset = tb_store(redis, key, new_x, d, interval, now)
-- Admitted; a reservation goes once its tokens are due.
local wait = 0
if new_x > tau then wait = div_ceil(new_x - tau, d) end
return {1, div_floor(math.max(full - new_x, 0), interval), wait, reset, now}
