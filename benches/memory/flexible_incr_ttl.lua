-- rate-limiter-flexible 11.4.0 (ISC), lib/RateLimiterRedis.js's incrTtlLuaScript, verbatim below
-- this line (line continuations removed): its fixed window, as RateLimiterRedis runs it.
redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX')
local consumed = redis.call('incrby', KEYS[1], ARGV[1])
local ttl = redis.call('pttl', KEYS[1])
if ttl == -1 then
  redis.call('expire', KEYS[1], ARGV[2])
  ttl = 1000 * ARGV[2]
end
return {consumed, ttl}
