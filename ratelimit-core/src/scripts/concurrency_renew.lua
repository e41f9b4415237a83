-- Renews the leases of a call's concurrency slots while it runs (after prelude.lua; see
-- concurrency.lua for the members). A member whose lease has ended is not renewed: its slot
-- may have been taken since.
--
-- KEYS[1]  the set
-- ARGV[1]  holder: the call's id (decimal)
-- ARGV[2]  lease, microseconds
-- Returns the number of members renewed (0: the call has lost its slots).
local key = KEYS[1]
local holder = ARGV[1]
local until_ = now + tonumber(ARGV[2])
if redis.call('TYPE', key).ok ~= 'zset' then return 0 end
local mine = {}
for _, member in ipairs(redis.call('ZRANGE', key, '(' .. int(now), '+inf', 'BYSCORE')) do
  if string.sub(member, 1, 2 + #holder + 1) == 'h:' .. holder .. ':' then
    mine[#mine + 1] = int(until_)
    mine[#mine + 1] = member
  end
end
if #mine == 0 then return 0 end
redis.call('ZADD', key, 'XX', unpack(mine))
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', key, int(div_ceil(tonumber(last[2]), 1000)))
return #mine / 2
