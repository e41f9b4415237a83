-- Probe (not a limiter): the least a token bucket can do per decision, for every key of the
-- call (one limit for all): the theoretical arrival time in whole microseconds as the value,
-- one GET and one SET .. PXAT, no limit change, no reservation, no sub-microsecond units, no
-- check of a foreign value. It shows the floor of the Lua work, not a script this library
-- could ship. (`lua_cost` measures it; the marked line is where a PEXPIRETIME of an existing
-- bucket would go.)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  local tat = now
  if v then
    -- PEXPIRETIME
    local s = tonumber(v)
    if s and s > now then tat = s end
  end
  local new = tat + cost * interval
  if new - now > tau then
    out[i] = {0, 0, new - now - tau, tat - now, now}
  else
    redis.call('SET', KEYS[i], string.format('%d', new), 'PXAT', string.format('%d', math.ceil(new / 1000)))
    out[i] = {1, math.floor((tau - (new - now)) / interval), 0, new - now, now}
  end
end
return out
