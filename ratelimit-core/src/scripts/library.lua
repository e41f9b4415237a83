-- The function library's entry points (after every script of the library, each a function of
-- its KEYS, ARGV and `redis`): `FCALL <PREFIX><name>` runs a script exactly as `EVALSHA` runs
-- it alone, with the same keys, arguments and reply. Only code that runs at `FUNCTION LOAD`
-- is here; each call's state (the clock, KEYS, ARGV, the `redis` whose commands run) is set at
-- its start, since at load `redis` is the loading API, which cannot call commands.
-- PREFIX (the library's first line) names the library's code by its hash, so that two
-- versions of the crate on one server each call their own functions.
local function entry(f)
  return function(keys, args)
    real = redis
    KEYS, ARGV = keys, args
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    return f(keys, args, redis)
  end
end
local function register(name, f, flags)
  redis.register_function{function_name = PREFIX .. name, callback = entry(f), flags = flags}
end
-- Several limits, or several calls: keys of several slots that the node serves, as the
-- scripts' `#!lua flags=allow-cross-slot-keys` allows.
register('multi', MULTI, {'allow-cross-slot-keys'})
register('batch', BATCH, {'allow-cross-slot-keys'})
register('concurrency_release', CONCURRENCY_RELEASE)
register('concurrency_renew', CONCURRENCY_RENEW)
register('heartbeat', HEARTBEAT)
