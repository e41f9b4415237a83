-- redis-ratelimit: the writes of one native `batch`, replayed where the module is not loaded
-- (a replica, the AOF). Propagated by the module as one EVAL of this script instead of one
-- command per write. KEYS[i] is the key of the i-th write; ARGV[1] holds each write, in
-- order, as `<n>;` then n fields, each `<length>:<bytes>`: the command's name, then its
-- arguments after the key (`SET`, `<value>`, `PXAT`, `<ms>`). Nothing is read or decided here.
local packed, at = ARGV[1], 1
for i = 1, #KEYS do
  local close = string.find(packed, ';', at, true)
  local n = tonumber(string.sub(packed, at, close - 1))
  at = close + 1
  local args = {}
  for field = 1, n do
    close = string.find(packed, ':', at, true)
    local len = tonumber(string.sub(packed, at, close - 1))
    args[#args + 1] = string.sub(packed, close + 1, close + len)
    at = close + len + 1
    if field == 1 then
      args[#args + 1] = KEYS[i]
    end
  end
  redis.call(unpack(args))
end
