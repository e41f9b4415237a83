-- Gives back a call's concurrency slots, and its ticket if it was waiting (after
-- prelude.lua; see concurrency.lua for the members).
--
-- KEYS[1]  the set
-- ARGV[1]  holder: the call's id (decimal)
-- ARGV[2]  (optional) the fleet's pub/sub channel: when a slot was given back and calls still
--          wait for one, the set's key is published there, so that waiters on every instance
--          ask again at once (the channel of resets, whose listeners read a message as a
--          bucket to forget: nothing to forget of a concurrency set)
-- Returns the number of members removed.
local key = KEYS[1]
local holder = ARGV[1]
if redis.call('TYPE', key).ok ~= 'zset' then return 0 end
local padded = string.rep('0', 20 - #holder) .. holder
local gone = {}
for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
  local c = string.sub(member, 1, 1)
  if (c == 'h' and string.sub(member, 3, 2 + #holder + 1) == holder .. ':')
      or (c == 'w' and string.sub(member, 21, 40) == padded) then
    gone[#gone + 1] = member
  end
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
if #gone > 0 then redis.call('ZREM', key, unpack(gone)) end
if #gone > 0 and ARGV[2] then
  local waiting = false
  for _, member in ipairs(redis.call('ZRANGE', key, '(' .. int(now), '+inf', 'BYSCORE')) do
    if string.sub(member, 1, 1) == 'w' then
      waiting = true
      break
    end
  end
  if waiting then redis.call('PUBLISH', ARGV[2], key) end
end
return #gone
