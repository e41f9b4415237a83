-- One concurrency decision, atomically, on the Redis server's clock (after prelude.lua):
-- at most `max` calls of one key in flight. The twin of algorithm/concurrency.rs, which
-- describes the state: a sorted set of members scored by the instant (us) their lease ends,
--   h:<holder>:<j>    a slot held (j from 1 to the call's cost), scored by its lease end;
--   w:<arrival 17 digits>:<holder 20 digits>:<cost>   a ticket of a call waiting for a slot,
--                     scored by its lease end plus TICKET (2^52), so that the slots held are
--                     counted by one ZCOUNT and the tickets (few) read apart from them.
-- A member whose lease has ended counts for nothing. A call is admitted when the slots held
-- plus its cost stay within max and no live ticket is ahead of its own (a call without a
-- ticket has every ticket ahead of it); refused, a call that may wait leaves or renews its
-- ticket. Writes only commands multi.lua defers (ZREMRANGEBYSCORE, ZREM, ZADD, PEXPIREAT),
-- so that beside other limits it takes its slot only if they all admit the call. Work per
-- call: O(log n + tickets + cost), whatever the max.
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
local TICKET = 4503599627370496

-- A value this script never writes is dropped: it costs that key its slots, never an error.
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then
  redis.log(redis.LOG_WARNING, 'redis-ratelimit: a concurrency key held another type; dropped')
  redis.call('DEL', key)
end

local held = redis.call('ZCOUNT', key, '(' .. int(now), '(' .. int(TICKET))
-- The earliest and the latest lease end of the slots held.
local function held_end(latest)
  local got
  if latest then
    got = redis.call('ZRANGE', key, '(' .. int(TICKET), '(' .. int(now), 'BYSCORE', 'REV',
      'LIMIT', 0, 1, 'WITHSCORES')
  else
    got = redis.call('ZRANGE', key, '(' .. int(now), '(' .. int(TICKET), 'BYSCORE',
      'LIMIT', 0, 1, 'WITHSCORES')
  end
  return tonumber(got[2])
end
local earliest, latest = held_end(false), held_end(true)
local function later(a, b)
  if a == nil or (b ~= nil and b > a) then return b end
  return a
end
local function sooner(a, b)
  if a == nil or (b ~= nil and b < a) then return b end
  return a
end

local padded = string.rep('0', 20 - #holder) .. holder
local tickets = redis.call('ZRANGE', key, '(' .. int(TICKET + now), '+inf', 'BYSCORE',
  'WITHSCORES')
local first, last, mine, own_ticket = nil, nil, nil, nil
for i = 1, #tickets, 2 do
  local member, ends = tickets[i], tonumber(tickets[i + 1]) - TICKET
  latest = later(latest, ends)
  earliest = sooner(earliest, ends)
  local ticket = string.sub(member, 3, 40)
  if first == nil or ticket < first then first = ticket end
  if last == nil or ticket > last then last = ticket end
  if string.sub(member, 21, 40) == padded then
    mine = ticket
    own_ticket = member
  end
end

local function reset(last_end)
  if last_end == nil then return 0 end
  return last_end - now
end

if cost == 0 then
  return {1, math.max(max - held, 0), 0, reset(latest), now}
end

local ahead = first ~= nil and (mine == nil or first < mine)
if held + cost <= max and not ahead then
  local until_ = now + lease
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  redis.call('ZREMRANGEBYSCORE', key, int(TICKET), int(TICKET + now))
  if own_ticket ~= nil then redis.call('ZREM', key, own_ticket) end
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
  latest = later(latest, until_)
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
  redis.call('ZREMRANGEBYSCORE', key, int(TICKET), int(TICKET + now))
  if own_ticket ~= nil then redis.call('ZREM', key, own_ticket) end
  redis.call('ZADD', key, int(TICKET + until_),
    'w:' .. arrival .. ':' .. padded .. ':' .. int(cost))
  latest = later(latest, until_)
  redis.call('PEXPIREAT', key, int(div_ceil(latest, 1000)))
end
return {0, math.max(max - held, 0), retry, reset(latest), now}
