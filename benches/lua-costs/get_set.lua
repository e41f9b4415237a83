-- Probe (not a limiter): time_only.lua plus one GET and one SET .. PXAT with constant values:
-- the read and the write every token-bucket decision makes.
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '12345000', 'PXAT', '1900000000000')
return 1
