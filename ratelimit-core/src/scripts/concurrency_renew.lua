-- Renews the leases of a call's concurrency slots while it runs (after prelude.lua; see
-- concurrency.lua for the members). The call runs, so its slots are written whether or not
-- they are there: a slot whose lease ended (taken since, perhaps), one Redis lost (restarted
-- without its data) or one it never granted (the failure policy's fallback did, while Redis
-- was down) is counted again, even above the max, so that no call is granted beside it
-- until it ends.
--
-- KEYS[1]  the set
-- ARGV[1]  holder: the call's id (decimal)
-- ARGV[2]  lease, microseconds
-- ARGV[3]  cost: the slots the call took (its members h:<holder>:1 .. h:<holder>:cost)
-- Returns the number of slots that were live (0: the call had lost them, or never had them
-- here).
local key = KEYS[1]
local holder = ARGV[1]
local until_ = now + tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local TICKET = 4503599627370496
local kind = redis.call('TYPE', key).ok
if kind ~= 'zset' and kind ~= 'none' then return 0 end
local renewed = 0
local latest = until_
local n = 1
while n <= cost do
  local members = {}
  for j = n, math.min(cost, n + 999) do members[#members + 1] = 'h:' .. holder .. ':' .. int(j) end
  local scores = redis.call('ZMSCORE', key, unpack(members))
  local written = {}
  for j = 1, #members do
    local s = tonumber(scores[j])
    if s and s > now and s < TICKET then renewed = renewed + 1 end
    written[#written + 1] = int(until_)
    written[#written + 1] = members[j]
  end
  redis.call('ZADD', key, unpack(written))
  n = n + 1000
end
-- The key lives until the last lease ends: a slot's, or a ticket's.
local slot = redis.call('ZRANGE', key, '(' .. int(TICKET), '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1,
  'WITHSCORES')
local ticket = redis.call('ZRANGE', key, '+inf', int(TICKET), 'BYSCORE', 'REV', 'LIMIT', 0, 1,
  'WITHSCORES')
if slot[2] and tonumber(slot[2]) > latest then latest = tonumber(slot[2]) end
if ticket[2] and tonumber(ticket[2]) - TICKET > latest then latest = tonumber(ticket[2]) - TICKET end
redis.call('PEXPIREAT', key, int(div_ceil(latest, 1000)))
return renewed
