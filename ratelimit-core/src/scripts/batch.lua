-- Several independent calls bound for one node, decided in one script (after prelude.lua,
-- multi_head.lua, the algorithms and call.lua): each exactly as if it were alone, in order,
-- at the same server time, so a later call sees what an earlier one took.
-- KEYS[1]   the first call's first key (declared, so that a cluster client routes the batch
--           to its node; allow-cross-slot-keys lets the script reach every key the node
--           serves)
-- ARGV[1]   m, the number of calls
-- then, per call: n, its number of limits; its n keys; per limit, as multi.lua takes them:
--           its algorithm (plus SHADOW_BIT in shadow mode), the number of its arguments, and those
--           arguments. Or, for a call of one limit whose algorithm and arguments are the
--           previous call's (itself of one limit): 0 and its key only.
-- Returns one entry per call: what its own script would return (one limit: that algorithm's
-- script, five numbers; several: multi.lua in mode 0, four numbers per limit and the server
-- time), or, if deciding it raised an error (a key of another type, a key this node does not
-- serve), the error's text as a string. One call's error does not fail the others: a call
-- writes only after all of its limits have decided, so a failed call wrote nothing.
local m = tonumber(ARGV[1])
local at = 2
local out = {}
-- One limit's key and arguments, in tables reused from call to call (every algorithm reads
-- its KEYS and ARGV once, at its start): a batch is mostly one-limit calls, and a table
-- per call is a good part of a decision's cost here.
local key1, args1, count1, algorithm1 = {}, {}, 0, nil
for c = 1, m do
  local n = tonumber(ARGV[at])
  local ok, reply
  if n == 0 then
    -- The previous call's limit again, on another key: its algorithm and arguments are
    -- still in place (no algorithm writes to the tables it is given).
    key1[1] = ARGV[at + 1]
    at = at + 2
    ok, reply = pcall(ALGORITHMS[algorithm1], key1, args1, redis)
  elseif n == 1 then
    -- One limit is its own all or nothing: its script as it runs alone.
    key1[1] = ARGV[at + 1]
    algorithm1 = tonumber(ARGV[at + 2]) % SHADOW_BIT
    local count = tonumber(ARGV[at + 3])
    for j = 1, count do args1[j] = ARGV[at + 3 + j] end
    for j = count + 1, count1 do args1[j] = nil end
    count1 = count
    at = at + 4 + count
    ok, reply = pcall(ALGORITHMS[algorithm1], key1, args1, redis)
  else
    local keys = {}
    for i = 1, n do keys[i] = ARGV[at + i] end
    local specs
    specs, at = parse(n, at + 1 + n)
    ok, reply = pcall(decide, MODE_DECIDE, keys, specs)
  end
  if ok then
    out[c] = reply
  elseif type(reply) == 'table' and reply.err then
    out[c] = reply.err
  else
    out[c] = tostring(reply)
  end
end
return out
