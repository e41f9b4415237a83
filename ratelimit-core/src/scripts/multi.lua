
-- KEYS[1]   the first limit's key (declared, so that a cluster client routes the call to
--           its node)
-- ARGV[1]   n, the number of limits
-- ARGV[2]   mode (the locals MODE_DECIDE .. MODE_SETTLE name them): 0 decide; 1 reserve (decide, and also return what each limit answered
--           before the call); 2 veto (another part of the call refused it: decide, take
--           nothing); 3 give back (what mode 1 reserved, for a call another node refused);
--           4 peek (answer as mode 0 would, write nothing; remaining is what each limit
--           holds now, before the call); 5 settle (below)
-- ARGV[3..n+2]  every limit's key, the first again. Only the first is declared: a cluster
--           node refuses declared keys of several slots, while the allow-cross-slot-keys flag
--           lets the script reach keys of any slot the node serves (and a key it does not
--           serve fails the script before anything is written).
-- then, per limit: its algorithm's id (`StateKind` in algorithm/kind.rs; plus SHADOW_BIT, 8,
--           for a limit in shadow mode, whose refusal does not refuse the call), the number of its
--           arguments, and those arguments as its own script takes them
-- then, in mode 3 only: the server time (us) at which mode 1 reserved
-- or, in mode 5 (settle: each limit's cost was an estimate, taken at a server time), that
--           time (us), then per limit its actual cost and the debt it allows (tokens): a
--           smaller actual gives the difference back (as mode 3), a larger one takes it at
--           once, into debt up to that bound. Returns, per limit, the tokens taken and those
--           given back (one of the two 0), then the server time (us). The token bucket, the fixed window and the sliding log settle; any
--           other limit fails the call (the limiter never asks).
-- Returns each limit's {allowed, remaining, retry_after us, reset_after us}, one after the
-- other, then the server time (us). A limit that admits a call another limit refused says so
-- (allowed 1), with its remaining and reset_after as they stand: it took nothing. In reserve
-- mode, when every limit admits, two values per key follow: its remaining and reset_after
-- as they stood before the call (what it answers if the call is given back). Mode 3
-- returns n.
local n = tonumber(ARGV[1])
local keys = {}
for i = 1, n do keys[i] = ARGV[2 + i] end
local specs, at = parse(n, 3 + n)
local mode = tonumber(ARGV[2])
local settle = nil
if mode == MODE_SETTLE then
  settle = {}
  for i = 1, n do
    settle[i] = {tonumber(ARGV[at + 2 * i - 1]), tonumber(ARGV[at + 2 * i])}
  end
end
return decide(mode, keys, specs, tonumber(ARGV[at]), settle)
