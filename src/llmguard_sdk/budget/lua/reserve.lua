-- Reserve a call's worst case on every counter, all or nothing (mirrors policy.decide).
-- ARGV: 1 clock offset, 2 reservation id, 3 hold seconds (TTL), 4 base (nano-dollars),
--       5 nano-dollars per output token, 6 wanted output tokens, 7 fewest output tokens,
--       8 number of counters, then PER arguments per counter (see common.lua).
--       After the counters: the calling process's id and the seconds a process counts as
--       alive since its last reservation, then each counter's scope kind (tenant, user ...).
--       KEYS: 3 per counter, then the set's process set.
-- Returns {1, tokens, amount, ...} or {0, refused counter (0-based), spent, reserved,
-- resets_at, 1 when this refusal is the window's 100 % alert: the settled spend alone leaves
-- no room for a call that would fit an empty window, then the earliest expiry of its holds
-- when they explain the refusal (the settled spend alone leaves room; else 0), ...}; "..." is
-- the number of processes
-- alive, then each counter's room left (after this reservation): what a process may spend
-- on its own while Redis is away is worked out from them (a share of what is left, divided
-- among the processes alive).
local hold = tonumber(ARGV[3])
local base, per, want, minimum = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
  tonumber(ARGV[7])
local n = tonumber(ARGV[8])
local procs, alive = KEYS[n * 3 + 1], tonumber(ARGV[10 + n * PER])
redis.call('ZADD', procs, string.format('%.6f', now), ARGV[9 + n * PER])
redis.call('ZREMRANGEBYSCORE', procs, '-inf', string.format('%.6f', now - alive))
redis.call('EXPIRE', procs, math.ceil(alive) + 60)
local live = redis.call('ZCARD', procs)
local counters, smallest = {}, nil
for i = 1, n do
  local c = counter(i, 9)
  bring(c)
  c.room = c.limit - c.spent - c.reserved
  counters[i] = c
  if smallest == nil or c.room < smallest then smallest = c.room end
end
local tokens = want
if base + want * per > smallest then
  if per > 0 then tokens = math.floor((smallest - base) / per) else tokens = -1 end
end
if tokens < minimum or tokens < 0 then
  local need = base + math.max(minimum, 0) * per
  local refused = nil
  for i = 1, n do
    if refused == nil and counters[i].room < need then refused = i end
  end
  if refused == nil then
    for i = 1, n do
      if refused == nil and counters[i].room == smallest then refused = i end
    end
  end
  local c = counters[refused]
  -- holds keep the settled spend from touching the limit: the first refusal of a window that
  -- the settled spend alone explains is its 100 % alert (when configured and not yet fired)
  local alerted = 0
  for _, a in ipairs(c.alerts) do
    if tonumber(a) == 1 and need <= c.limit and c.spent + need > c.limit
      and redis.call('HSETNX', c.h, 'a:' .. a, 1) == 1 then
      alerted = 1
      redis.call('HSET', c.h, 'x', string.format('%d', c.spent))  -- (see bring in common.lua)
    end
  end
  local frees = 0  -- held back by calls in flight: room comes back as their holds go
  if c.reserved > 0 and c.spent + need <= c.limit then
    local first = redis.call('ZRANGE', c.e, 0, 0, 'WITHSCORES')
    if #first > 0 then frees = tonumber(first[2]) end
  end
  for i = 1, n do keep(counters[i], 0) end  -- a window just brought in must expire too
  local out = {0, refused - 1, string.format('%d', c.spent), string.format('%d', c.reserved),
    string.format('%.6f', c.resets), alerted, string.format('%.6f', frees), live}
  for i = 1, n do out[#out + 1] = string.format('%d', counters[i].room) end
  return out
end
local amount = math.ceil(base + tokens * per)
for i = 1, n do
  local c = counters[i]
  -- the counter's spec beside its state (L limit, K window, S rolling seconds, A alerts, P
  -- scope kind, Z time zone), so `llmguard budget status` can read a counter without the
  -- application's configuration
  redis.call('HSET', c.h, 'r', string.format('%d', c.reserved + amount),
    'h:' .. ARGV[2], string.format('%d', amount),
    'L', string.format('%d', c.limit), 'K', c.kind, 'S', ARGV[9 + (i - 1) * PER + 2],
    'A', ARGV[9 + (i - 1) * PER + 3], 'P', ARGV[10 + n * PER + i], 'Z', c.tz)
  redis.call('ZADD', c.e, string.format('%.6f', now + hold), ARGV[2])
  keep(c, hold)
end
local out = {1, tokens, string.format('%d', amount), live}
for i = 1, n do out[#out + 1] = string.format('%d', counters[i].room - amount) end
return out
