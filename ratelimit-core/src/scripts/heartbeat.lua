-- One instance's heartbeat: record it as alive now (the server's clock), forget instances
-- silent for longer than the TTL, and return how many are alive and whether this one was
-- missing (1: its first beat, or the set lost since its last).
--
-- KEYS[1]  the sorted set of instances (member: instance id, score: last beat in ms)
-- ARGV[1]  this instance's id
-- ARGV[2]  TTL in milliseconds
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local new = redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return {redis.call('ZCARD', KEYS[1]), new}
