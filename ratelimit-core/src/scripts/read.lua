#!lua flags=no-writes
-- Reads one bucket key as redis-ratelimit's decision scripts left it, writing nothing: the
-- server time (TIME, the clock the scripts decide on), the key's type, its value (a string's
-- text; a sorted set's scores, oldest first, or with ARGV[1] = 'count' only how many), its
-- PEXPIRETIME (when the bucket is full again) and its PTTL.
--
-- KEYS[1]  the bucket
-- ARGV[1]  'full' or 'count'
-- Returns {seconds, microseconds, type, value or nil, PEXPIRETIME, PTTL}.

local key = KEYS[1]
local t = redis.call('TIME')
local kind = redis.call('TYPE', key).ok
local value = false
if kind == 'string' then
  value = redis.call('GET', key)
elseif kind == 'zset' then
  if ARGV[1] == 'count' then
    value = redis.call('ZCARD', key)
  else
    local members = redis.call('ZRANGE', key, '-inf', '+inf', 'BYSCORE', 'WITHSCORES')
    value = {}
    for i = 2, #members, 2 do
      value[#value + 1] = members[i]
    end
  end
end
return {t[1], t[2], kind, value, redis.call('PEXPIRETIME', key), redis.call('PTTL', key)}
