-- Several limits of one call, decided together (after prelude.lua): every algorithm's script
-- runs as a function of its own KEYS and ARGV, with a `redis` whose writes wait. Once every
-- limit has decided, the writes of all of them are made if all admit the call; otherwise
-- only those of the limits that refused it (a refusal writes only a state that must be read
-- differently from what it says, so that its retry_after comes true), and the call takes
-- nothing from any limit. One script, so all of it is atomic.
local real = redis
-- The commands the algorithms write with; everything else (reads, and DEL of a value no
-- script writes, which every reading overwrites anyway) runs at once.
local WRITES = {SET = true, INCRBY = true, ZADD = true, ZREM = true, ZREMRANGEBYSCORE = true,
  PEXPIREAT = true}
local function deferring(pending)
  return setmetatable({
    call = function(cmd, ...)
      if WRITES[cmd] then
        pending[#pending + 1] = {cmd, ...}
        return false
      end
      return real.call(cmd, ...)
    end,
  }, {__index = real})
end
-- Every algorithm's script as a function of its own KEYS, ARGV and `redis`, under its id:
-- the locals TOKEN_BUCKET, INTERVAL_BUCKET, FIXED_WINDOW, SLIDING_WINDOW, SLIDING_LOG and
-- CONCURRENCY, set
-- before this file from the one list of them (algorithm/kind.rs). `multi`'s modes
-- (MODE_DECIDE .. MODE_SETTLE) and SHADOW_BIT are set there too, from
-- `ratelimit_vocab::native`, whose numbers the module and the limiter use.
local ALGORITHMS = {}
