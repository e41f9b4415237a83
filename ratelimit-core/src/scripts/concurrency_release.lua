-- Gives back a call's concurrency slots, and its ticket if it was waiting (after
-- prelude.lua; see concurrency.lua for the members).
--
-- KEYS[1]  the set
-- ARGV[1]  holder: the call's id (decimal)
-- ARGV[2]  cost: the slots the call took (its members h:<holder>:1 .. h:<holder>:cost)
-- ARGV[3]  (optional) the fleet's pub/sub channel: when calls still wait for a slot, the
--          set's key is published there, so that waiters on every instance ask again at once
--          (the channel of resets, whose listeners read a message as a bucket to forget:
--          nothing to forget of a concurrency set)
-- Returns the number of members removed.
local key = KEYS[1]
local holder = ARGV[1]
local cost = tonumber(ARGV[2])
local TICKET = 4503599627370496
if redis.call('TYPE', key).ok ~= 'zset' then return 0 end
local padded = string.rep('0', 20 - #holder) .. holder
local gone = {}
for n = 1, cost do gone[#gone + 1] = 'h:' .. holder .. ':' .. int(n) end
local waiting = false
for _, member in ipairs(redis.call('ZRANGE', key, '(' .. int(TICKET + now), '+inf', 'BYSCORE')) do
  if string.sub(member, 21, 40) == padded then
    gone[#gone + 1] = member
  else
    waiting = true
  end
end
local removed = 0
local i = 0
while i < #gone do
  removed = removed + redis.call('ZREM', key, unpack(gone, i + 1, math.min(#gone, i + 1000)))
  i = i + 1000
end
if removed > 0 and waiting and ARGV[3] then redis.call('PUBLISH', ARGV[3], key) end
return removed
