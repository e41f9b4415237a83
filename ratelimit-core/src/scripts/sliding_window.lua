-- One sliding-window decision, atomically, on the Redis server's clock (after prelude.lua).
--
-- Two fixed windows aligned to multiples of the period, the previous one weighted by the
-- part of it still inside the sliding period: estimate = prev x (1 - elapsed / period) + cur.
-- Compared in exact integers, scaled by the period in ticks (a millisecond when the period
-- is whole milliseconds, else a microsecond): prev x (ticks - elapsed) + (cur + cost) x ticks
-- <= limit x ticks, so the previous window's weight falls one tick at a time.
--
-- One key, a string "window:prev:cur" (window = the index of the current window, now / period):
-- measured in Redis 7.0 (testkit/tests/algorithms.rs, memory_per_active_key), 187 bytes per
-- active key against 207 for a hash of the same three fields.
-- It expires at the end of the window after the one written (when cur's weight reaches 0);
-- the stored index, not the key's presence, says which windows the counts belong to.
-- Counts above the limit (the limit was lowered) read as the limit, the same on every read.
--
-- KEYS[1]  the state
-- ARGV[1]  limit: tokens per period
-- ARGV[2]  period, microseconds
-- ARGV[3]  tick, microseconds (divides the period)
-- ARGV[4]  cost: tokens this call takes
-- Returns {allowed (0|1), remaining, retry_after us, reset_after us, now us}.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local tick = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local ticks = period / tick

local window = div_floor(now, period)
local start = window * period
local elapsed = div_floor(now - start, tick)

local prev, cur = 0, 0
local got = redis.pcall('GET', key)
if type(got) == 'string' then
  local w, p, c = string.match(got, '^(%d+):(%d+):(%d+)$')
  if w then
    w, p, c = tonumber(w), tonumber(p), tonumber(c)
    if w == window then
      prev, cur = p, c
    elseif w + 1 == window then
      prev = c
    end
  end
end
prev = math.min(prev, limit)
cur = math.min(cur, limit)

local weighted = prev * (ticks - elapsed)
if weighted + (cur + cost) * ticks > limit * ticks then
  -- The earliest tick at which the same call passes: in this window if the previous one's
  -- weight falls far enough, else in the next (cur becomes prev, weighted from its start).
  local at = nil
  if cur + cost <= limit and prev > 0 then
    local e = ticks - div_floor((limit - cur - cost) * ticks, prev)
    if e < ticks then at = start + e * tick end
  end
  if at == nil then
    local e = 0
    if cur > 0 then e = math.max(ticks - div_floor((limit - cost) * ticks, cur), 0) end
    at = start + period + e * tick
  end
  local reset = 0
  if cur > 0 then reset = start + 2 * period - now elseif prev > 0 then reset = start + period - now end
  local room = limit * ticks - weighted - cur * ticks
  return {0, math.max(div_floor(math.max(room, 0), ticks), 0), at - now, reset, now}
end

cur = cur + cost
local stop = start + 2 * period
redis.call('SET', key, int(window) .. ':' .. int(prev) .. ':' .. int(cur), 'PXAT', int(div_ceil(stop, 1000)))
return {1, div_floor(limit * ticks - weighted - cur * ticks, ticks), 0, stop - now, now}
