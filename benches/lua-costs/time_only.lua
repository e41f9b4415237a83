-- Probe (not a limiter): EVALSHA, TIME and a constant reply; the floor of any decision script.
local t = redis.call('TIME')
return 1
