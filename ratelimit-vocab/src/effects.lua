-- redis-ratelimit: the writes of one native `batch`, replayed where the module is not loaded
-- (a replica, the AOF). Propagated by the module as one EVAL of this script instead of one
-- command per write. KEYS[i] is the key of the i-th write; ARGV[1] holds each write, in
-- order, as `<n>;` then n fields, each `<length>:<bytes>`: the command's name, then its
-- arguments after the key (`SET`, `<value>`, `PXAT`, `<ms>`). Nothing is read or decided here.
local packed, at = ARGV[1], 1
local find, sub, call = string.find, string.sub, redis.call
-- The next field, from `at` on.
local function field()
  local close = find(packed, ':', at, true)
  local len = tonumber(sub(packed, at, close - 1))
  at = close + len + 1
  return sub(packed, close + 1, close + len)
end
for i = 1, #KEYS do
  local close = find(packed, ';', at, true)
  local n = tonumber(sub(packed, at, close - 1))
  at = close + 1
  local command = field()
  -- The module's writes take the key and 0 to 3 arguments but for a sorted set's: one
  -- call each without a table, the rest unpacked.
  if n == 4 then
    local a = field()
    local b = field()
    call(command, KEYS[i], a, b, field())
  elseif n == 2 then
    call(command, KEYS[i], field())
  elseif n == 1 then
    call(command, KEYS[i])
  else
    local args = { command, KEYS[i] }
    for _ = 2, n do
      args[#args + 1] = field()
    end
    call(unpack(args))
  end
end
