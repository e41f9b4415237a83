
-- KEYS[1]   the first limit's key (declared, so that a cluster client routes the call to
--           its node)
-- ARGV[1]   n, the number of limits
-- ARGV[2]   mode: 0 decide; 1 reserve (decide, and also return each key as it was before
--           and after, for give_back.lua); 2 veto (another part of the call refused it:
--           decide, take nothing)
-- ARGV[3..n+2]  every limit's key, the first again. Only the first is declared: a cluster
--           node refuses declared keys of several slots, while the allow-cross-slot-keys flag
--           lets the script reach keys of any slot the node serves (and a key it does not
--           serve fails the script before anything is written).
-- then, per limit: its algorithm (1 token bucket, 2 interval bucket, 3 fixed window,
--           4 sliding window, 5 sliding log), the number of its arguments, and those
--           arguments as its own script takes them
-- Returns each limit's {allowed, remaining, retry_after us, reset_after us}, one after the
-- other, then the server time (us). A limit that admits a call another limit refused says so
-- (allowed 1), with its remaining and reset_after as they stand: it took nothing. In reserve
-- mode, when every limit admits, five values per key follow: its DUMP before, its
-- PEXPIRETIME before and its DUMP after (for give_back.lua), then its remaining and
-- reset_after as they stood before the call (what it answers if the call is given back).
local n = tonumber(ARGV[1])
local mode = tonumber(ARGV[2])
local at = 3 + n
local replies, pending, specs = {}, {}, {}
local all = true
for i = 1, n do
  local algorithm = tonumber(ARGV[at])
  local count = tonumber(ARGV[at + 1])
  local args = {}
  for j = 1, count do args[j] = ARGV[at + 1 + j] end
  at = at + 2 + count
  -- Where the cost is among the arguments: fourth for the token bucket (an initial fill
  -- may follow it), last for the others.
  local cost_at = count
  if algorithm == 1 then cost_at = 4 end
  specs[i] = {algorithm, args, cost_at}
  pending[i] = {}
  replies[i] = ALGORITHMS[algorithm]({ARGV[2 + i]}, args, deferring(pending[i]))
  if replies[i][1] == 0 then all = false end
end
if mode == 2 then all = false end

-- Limit i's {remaining, reset_after} as they stand: its script for a cost of 0, before any
-- write of this call, its own writes dropped.
local function peek(i)
  local algorithm, args, cost_at = specs[i][1], {}, specs[i][3]
  for j, v in ipairs(specs[i][2]) do args[j] = v end
  args[cost_at] = '0'
  local r = ALGORITHMS[algorithm]({ARGV[2 + i]}, args, deferring({}))
  return {r[2], r[4]}
end
if not all then
  for i = 1, n do
    if replies[i][1] == 1 then
      local p = peek(i)
      replies[i][2], replies[i][4] = p[1], p[2]
    end
  end
end
local before = {}
if mode == 1 and all then
  for i = 1, n do
    local key = ARGV[2 + i]
    before[i] = {real.call('DUMP', key) or '', real.call('PEXPIRETIME', key), peek(i)}
  end
end
local out = {}
for i = 1, n do
  if all or replies[i][1] == 0 then
    for _, c in ipairs(pending[i]) do real.call(unpack(c)) end
  end
  for j = 1, 4 do out[#out + 1] = replies[i][j] end
end
out[#out + 1] = now
if mode == 1 and all then
  for i = 1, n do
    local key = ARGV[2 + i]
    out[#out + 1] = before[i][1]
    out[#out + 1] = before[i][2]
    out[#out + 1] = real.call('DUMP', key) or ''
    out[#out + 1] = before[i][3][1]
    out[#out + 1] = before[i][3][2]
  end
end
return out
