#!lua flags=no-writes
-- Reads one bucket key as redis-ratelimit's decision scripts left it, writing nothing: the
-- server time (TIME, the clock the scripts decide on), the key's type, its value (a string's
-- text; a sorted set's scores, oldest first, or with ARGV[1] = 'count' only how many), its
-- PEXPIRETIME (when the bucket is full again; what is left of it follows from TIME, so the
-- script needs no PTTL, which the least ACL of docs/operations.md does not grant), and with
-- 'count' a sorted set's highest score (a concurrency limit's leases end in the future, a
-- sliding log's admissions were in the past: what tells the two apart without reading every
-- score).
--
-- KEYS[1]  the bucket
-- ARGV[1]  'full' or 'count'
-- Returns {seconds, microseconds, type, value or nil, PEXPIRETIME, highest or nil}.

local key = KEYS[1]
local t = redis.call('TIME')
local kind = redis.call('TYPE', key).ok
local value = false
local highest = false
if kind == 'string' then
  value = redis.call('GET', key)
elseif kind == 'zset' then
  if ARGV[1] == 'count' then
    value = redis.call('ZCARD', key)
    highest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  else
    local members = redis.call('ZRANGE', key, '-inf', '+inf', 'BYSCORE', 'WITHSCORES')
    value = {}
    for i = 2, #members, 2 do
      value[#value + 1] = members[i]
    end
  end
end
return {t[1], t[2], kind, value, redis.call('PEXPIRETIME', key), highest}
