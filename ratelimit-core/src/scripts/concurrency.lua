-- One concurrency decision, atomically, on the Redis server's clock (after prelude.lua):
-- at most `max` calls of one key in flight. The twin of algorithm/concurrency.rs, which
-- describes the state: a sorted set of members scored by the instant (us) their lease ends,
--   h:<holder>:<j>                       a slot held (j from 1 to the call's cost)
--   w:<arrival 17 digits>:<holder 20 digits>:<cost>   a ticket of a call waiting for a slot
-- A member whose lease has ended counts for nothing. A call is admitted when the slots held
-- plus its cost stay within max and no live ticket is ahead of its own (a call without a
-- ticket has every ticket ahead of it); refused, a call that may wait leaves or renews its
-- ticket. Writes only SET-like commands multi.lua defers (ZREMRANGEBYSCORE, ZREM, ZADD,
-- PEXPIREAT), so that beside other limits it takes its slot only if they all admit the call.
--
-- KEYS[1]  the set
-- ARGV[1]  max: slots
-- ARGV[2]  lease, microseconds
-- ARGV[3]  holder: the call's id (decimal, used as text)
-- ARGV[4]  queue: 1 when a refused call waits for a slot
-- ARGV[5]  cost: slots this call takes (0: answer, take nothing, write nothing)
-- Returns {allowed (0|1), remaining, retry_after us, reset_after us, now us}.

local key = KEYS[1]
local max = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local holder = ARGV[3]
local queue = ARGV[4] == '1'
local cost = tonumber(ARGV[5])
local RETRY_HINT = 1000000

-- A value this script never writes is dropped: it costs that key its slots, never an error.
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then
  redis.log(redis.LOG_WARNING, 'redis-ratelimit: a concurrency key held another type; dropped')
  redis.call('DEL', key)
end

local padded = string.rep('0', 20 - #holder) .. holder
local live = redis.call('ZRANGE', key, '(' .. int(now), '+inf', 'BYSCORE', 'WITHSCORES')
local held, first, last, mine, latest, earliest = 0, nil, nil, nil, nil, nil
-- The latest lease end but the call's own members', and but its own ticket's: what stays
-- once it is admitted (its members replaced), or queued (its ticket replaced).
local others, but_ticket = nil, nil
local own = {}
local function later(a, b)
  if a == nil or b > a then return b end
  return a
end
for i = 1, #live, 2 do
  local member, score = live[i], tonumber(live[i + 1])
  latest = later(latest, score)
  if earliest == nil or score < earliest then earliest = score end
  local c = string.sub(member, 1, 1)
  local mine_too = false
  if c == 'h' then
    held = held + 1
    if string.sub(member, 3, 2 + #holder + 1) == holder .. ':' then
      own[#own + 1] = member
      mine_too = true
    end
    but_ticket = later(but_ticket, score)
  elseif c == 'w' then
    local ticket = string.sub(member, 3, 40)
    if first == nil or ticket < first then first = ticket end
    if last == nil or ticket > last then last = ticket end
    if string.sub(member, 21, 40) == padded then
      mine = ticket
      own[#own + 1] = member
      mine_too = true
    else
      but_ticket = later(but_ticket, score)
    end
  end
  if not mine_too then others = later(others, score) end
end

local function reset(last)
  if last == nil then return 0 end
  return last - now
end

if cost == 0 then
  return {1, math.max(max - held, 0), 0, reset(latest), now}
end

local ahead = first ~= nil and (mine == nil or first < mine)
if held + cost <= max and not ahead then
  local until_ = now + lease
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  if #own > 0 then redis.call('ZREM', key, unpack(own)) end
  -- At most 1000 members per ZADD, to stay within Lua's stack.
  local j = 0
  while j < cost do
    local batch = {}
    for n = j + 1, math.min(cost, j + 1000) do
      batch[#batch + 1] = int(until_)
      batch[#batch + 1] = 'h:' .. holder .. ':' .. int(n)
    end
    redis.call('ZADD', key, unpack(batch))
    j = j + 1000
  end
  latest = later(others, until_)
  redis.call('PEXPIREAT', key, int(div_ceil(latest, 1000)))
  return {1, max - held - cost, 0, reset(latest), now}
end

local retry = 1
if earliest ~= nil then retry = math.min(math.max(earliest - now, 1), RETRY_HINT) end
if queue then
  -- After every ticket there, even one of the same microsecond: tickets never tie.
  local at = now
  if last ~= nil then at = math.max(now, tonumber(string.sub(last, 1, 17)) + 1) end
  local arrival = string.format('%017d', at)
  if mine ~= nil then arrival = string.sub(mine, 1, 17) end
  local until_ = now + lease
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  for _, m in ipairs(own) do
    if string.sub(m, 1, 1) == 'w' then redis.call('ZREM', key, m) end
  end
  redis.call('ZADD', key, int(until_), 'w:' .. arrival .. ':' .. padded .. ':' .. int(cost))
  latest = later(but_ticket, until_)
  redis.call('PEXPIREAT', key, int(div_ceil(latest, 1000)))
end
return {0, math.max(max - held, 0), retry, reset(latest), now}
