-- One call's limits: `n` specs from ARGV[at] on (each: its algorithm's id, plus SHADOW_BIT in
-- shadow mode; the number of its arguments; the arguments). Returns the specs and the position after
-- them.
local function parse(n, at)
  local specs = {}
  for i = 1, n do
    local algorithm = tonumber(ARGV[at])
    local shadow = algorithm >= SHADOW_BIT
    if shadow then algorithm = algorithm - SHADOW_BIT end
    local count = tonumber(ARGV[at + 1])
    local args = {}
    for j = 1, count do args[j] = ARGV[at + 1 + j] end
    at = at + 2 + count
    -- Where the cost is among the arguments: fourth for the token bucket (an initial fill
    -- may follow it), last for the others.
    local cost_at = count
    if algorithm == TOKEN_BUCKET then cost_at = 4 end
    specs[i] = {algorithm, args, cost_at, shadow}
  end
  return specs, at
end

-- Decides one call's limits (the keys `keys`, the specs `specs`) in `mode` (see multi.lua);
-- in MODE_GIVE_BACK and MODE_SETTLE, `reserved_at` is the server time (us) at which the call took its tokens;
-- in MODE_SETTLE, `settle` holds each limit's {actual cost, debt allowed}.
local function decide(mode, keys, specs, reserved_at, settle)
  local n = #keys
  -- Limit i's script with another cost, its writes made through `proxy`.
  local function run(i, cost, proxy)
    local args = {}
    for j, v in ipairs(specs[i][2]) do args[j] = v end
    args[specs[i][3]] = string.format('%d', cost)
    return ALGORITHMS[specs[i][1]]({keys[i]}, args, proxy)
  end

  -- Limit i gives back `cost` tokens that a call took at `reserved_at`: tokens commute in a
  -- bucket (its own script for a negative cost, floored at full); a window gives them back
  -- only to the window that counted them (a later window never had them).
  local function give_back(i, cost)
    local algorithm, args, key = specs[i][1], specs[i][2], keys[i]
    if algorithm == TOKEN_BUCKET or algorithm == INTERVAL_BUCKET then
      -- A bucket whose key is gone is full (or forgotten): nothing to give back.
      if real.call('EXISTS', key) == 1 then run(i, -cost, real) end
    elseif algorithm == FIXED_WINDOW then
      local stop = window_end(reserved_at, args)
      local got = real.call('GET', key)
      if stop == window_end(now, args) and type(got) == 'string'
          and string.find(got, '^[1-9]%d*$')
          and real.call('PEXPIRETIME', key) == div_ceil(stop, 1000) then
        if tonumber(got) > cost then
          real.call('INCRBY', key, -cost)
        else
          real.call('DEL', key)
        end
      end
    elseif algorithm == SLIDING_WINDOW then
      local window = div_floor(reserved_at, tonumber(args[2]))
      local got = real.call('GET', key)
      if type(got) == 'string' then
        local w, p, c = string.match(got, '^(%d+):(%d+):(%d+)$')
        if w then
          w, p, c = tonumber(w), tonumber(p), tonumber(c)
          if w == window then c = math.max(c - cost, 0) end
          if w == window + 1 then p = math.max(p - cost, 0) end
          real.call('SET', key, int(w) .. ':' .. int(p) .. ':' .. int(c), 'KEEPTTL')
        end
      end
    elseif algorithm == SLIDING_LOG then
      -- The tokens reserved are `cost` entries at the instant of the reservation; any
      -- entries of that instant are the same tokens.
      local taken = real.call('ZRANGE', key, int(reserved_at), int(reserved_at), 'BYSCORE',
        'LIMIT', 0, cost)
      if #taken > 0 then real.call('ZREM', key, unpack(taken)) end
    elseif algorithm == CONCURRENCY then
      -- The slots are the holder's own members, h:<holder>:1 .. h:<holder>:cost.
      if real.call('TYPE', key).ok == 'zset' then
        local mine = {}
        for j = 1, cost do mine[#mine + 1] = 'h:' .. args[3] .. ':' .. int(j) end
        local i = 0
        while i < #mine do
          real.call('ZREM', key, unpack(mine, i + 1, math.min(#mine, i + 1000)))
          i = i + 1000
        end
      end
    end
  end

  -- Limit i takes `extra` more tokens, whatever it holds: into debt, up to `debt` tokens
  -- beyond empty (a bucket's, up to its hold too). Returns the tokens taken. The twins:
  -- `token_bucket::take_over`, `fixed_window::take_over`, `sliding_log::take_over`.
  local function take_over(i, extra, debt)
    local algorithm, args, key = specs[i][1], specs[i][2], keys[i]
    if algorithm == TOKEN_BUCKET then
      local interval, d, tau, absent, _, _, hold = tb_params(args)
      local x, stale = tb_owed(real, key, now, tau, hold, absent, d, interval)
      local most = tau + math.min(debt * interval, hold)
      local taken = 0
      if most > x then taken = math.min(extra, div_floor(most - x, interval)) end
      if taken > 0 or stale then tb_store(real, key, x + taken * interval, d, interval, now) end
      return taken
    elseif algorithm == FIXED_WINDOW then
      local limit = tonumber(args[1])
      local expire_ms = div_ceil(window_end(now, args), 1000)
      local count = fw_count(real, key, expire_ms)
      local taken = math.max(math.min(extra, limit + debt - count), 0)
      if taken > 0 then
        if count > 0 then
          real.call('INCRBY', key, int(taken))
        else
          real.call('SET', key, int(taken), 'PXAT', int(expire_ms))
        end
      end
      return taken
    elseif algorithm == SLIDING_LOG then
      -- Its own script adds the tokens, under a limit of what the log may then hold.
      local limit, period = tonumber(args[1]), tonumber(args[2])
      local live = 0
      if real.call('TYPE', key).ok == 'zset' then
        live = real.call('ZCOUNT', key, '(' .. int(now - period), '+inf')
      end
      local taken = math.max(math.min(extra, limit + debt - live), 0)
      if taken > 0 then
        ALGORITHMS[SLIDING_LOG]({key}, {int(live + taken), args[2], int(taken)}, real)
      end
      return taken
    end
    error('redis-ratelimit: a limit of this algorithm cannot settle a cost after the call')
  end

  if mode == MODE_GIVE_BACK then
    for i = 1, n do give_back(i, tonumber(specs[i][2][specs[i][3]])) end
    return n
  end

  if mode == MODE_SETTLE then
    -- Settle: each limit's call took its cost (an estimate) at `reserved_at`; the actual
    -- cost comes back or is taken, as it differs. Returns, per limit, the tokens taken and
    -- the tokens given back (one of them 0), then the server time.
    local out = {}
    for i = 1, n do
      local estimate = tonumber(specs[i][2][specs[i][3]])
      local actual, debt = settle[i][1], settle[i][2]
      local taken, given = 0, 0
      if actual < estimate then
        given = estimate - actual
        give_back(i, given)
      elseif actual > estimate then
        taken = take_over(i, actual - estimate, debt)
      end
      out[#out + 1] = taken
      out[#out + 1] = given
    end
    out[#out + 1] = now
    return out
  end

  local replies, pending = {}, {}
  local all = mode ~= MODE_VETO
  for i = 1, n do
    pending[i] = {}
    replies[i] = run(i, tonumber(specs[i][2][specs[i][3]]), deferring(pending[i]))
    if replies[i][1] == 0 and not specs[i][4] then all = false end
  end

  -- Limit i's {remaining, reset_after} as they stand: its script for a cost of 0, before any
  -- write of this call, its own writes dropped.
  local function peek(i)
    local r = run(i, 0, deferring({}))
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
  if mode == MODE_PEEK then
    -- A peek takes nothing: each limit's remaining, and when it is full again, are what it
    -- holds now.
    for i = 1, n do
      local p = peek(i)
      replies[i][2], replies[i][4] = p[1], p[2]
    end
  end
  local before = {}
  if mode == MODE_RESERVE and all then
    for i = 1, n do before[i] = peek(i) end
  end
  local out = {}
  for i = 1, n do
    if mode ~= MODE_PEEK and (all or replies[i][1] == 0) then
      for _, c in ipairs(pending[i]) do real.call(unpack(c)) end
    end
    for j = 1, 4 do out[#out + 1] = replies[i][j] end
  end
  out[#out + 1] = now
  for i = 1, #before do
    out[#out + 1] = before[i][1]
    out[#out + 1] = before[i][2]
  end
  return out
end
