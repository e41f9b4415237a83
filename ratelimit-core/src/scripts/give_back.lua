-- Gives back what multi.lua reserved on one node (mode 1) for a call that another node then
-- refused: each key is put back as it was, unless another call changed it since, in which
-- case it is left as it is (the bucket then keeps this call's tokens: emptier than it should
-- be, never fuller).
--
-- KEYS[1]  the first key (for routing)
-- ARGV[1]  n; then per key: the key, its DUMP before ('' when absent), its PEXPIRETIME
--          before (ms), and its DUMP after the reservation
-- Returns how many keys were given back.
local n = tonumber(ARGV[1])
local given = 0
for i = 0, n - 1 do
  local key = ARGV[2 + 4 * i]
  local before, expiry, after = ARGV[3 + 4 * i], tonumber(ARGV[4 + 4 * i]), ARGV[5 + 4 * i]
  if (redis.call('DUMP', key) or '') == after then
    if before == '' then
      redis.call('DEL', key)
    elseif expiry < 0 then
      redis.call('RESTORE', key, 0, before, 'REPLACE')
    else
      redis.call('RESTORE', key, expiry, before, 'REPLACE', 'ABSTTL')
    end
    given = given + 1
  end
end
return given
