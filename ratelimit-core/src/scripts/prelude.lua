-- Shared by the decision scripts (gcra, fixed_window, sliding_window, sliding_log,
-- interval_bucket, concurrency), prepended to each by `include_str!` so that each runs as one
-- script, and to the function library (library.lua) once. `clock.lua` follows it in a
-- script; the library reads the clock once per call instead.
-- Every quantity stays below 2^53 (checked in Rust), where Lua's doubles are exact integers.
-- Pass numbers to redis.call as text: int(v), or an argument's own text. Redis writes a bare
-- Lua number with snprintf's %.17g (exact below 2^53), which costs Redis more than
-- string.format('%d') does: passing the token bucket's two numbers bare made it 3-6 % dearer
-- (benches/results/history.md 3.11). Lua's own conversion (`..`) keeps 14 digits, which loses
-- microseconds: text built with `..` needs int() too.

-- Exact integer division of non-negative integers (the correction steps absorb any rounding
-- of the double quotient).
local function div_floor(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function div_ceil(a, b)
  local q = div_floor(a, b)
  if q * b < a then q = q + 1 end
  return q
end
-- An integer as Redis arguments and values want it: canonical decimal, no exponent.
local function int(v)
  return string.format('%d', v)
end
