-- The Redis server's time in microseconds, read once per script run (after prelude.lua).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
