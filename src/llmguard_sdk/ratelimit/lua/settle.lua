-- Correct a reservation by what the call used (negative: a refund) and give its lease back
-- (and its place in the queue).
-- Mirrors ratelimit.policy.settle.
-- KEYS: three per limit (state hash, queue, leases; see reserve.lua).
-- ARGV: 1 clock offset, 2 token delta, 3 input delta, 4 output delta, 5 lease ('' for none),
--   6 request delta (-1: the call was never sent, its request is given back);
--   then 5 per limit: rpm, tpm, input tpm, output tpm ('' for none), period.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[1])
local deltas = {tonumber(ARGV[6]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])}
local lease = ARGV[5]
local fields = {'r', 't', 'i', 'o'}
for c = 1, #KEYS / 3 do
  local a = 6 + (c - 1) * 5
  local period = tonumber(ARGV[a + 5])
  local state = KEYS[3 * c - 2]
  local saved = redis.call('HMGET', state, 'r', 't', 'i', 'o')
  local tats, changed = {}, false
  for q = 1, 4 do
    tats[q] = tonumber(saved[q]) or 0
    local limit = tonumber(ARGV[a + q])
    if limit and deltas[q] ~= 0 then
      tats[q] = tats[q] + deltas[q] * period / limit
      if deltas[q] < 0 then tats[q] = math.max(tats[q], now) end
      changed = true
    end
  end
  if changed then
    for q = 1, 4 do redis.call('HSET', state, fields[q], string.format('%.6f', tats[q])) end
  end
  -- at most 2^31 s: EXPIRE refuses what overflows its clock (a script error reads as Redis down)
  local last = math.max(tats[1], tats[2], tats[3], tats[4])
  local seconds = math.min(2147483647, math.max(1, math.ceil(last - now) + 1))
  local leases = KEYS[3 * c]
  local settled = false
  if lease ~= '' then  -- its lease, or its place in the queue (a call cut short while waiting)
    settled = redis.call('ZREM', leases, lease) == 1
    redis.call('ZREM', KEYS[3 * c - 1], lease)
  end
  local tokens = tonumber(ARGV[a + 2]) or tonumber(ARGV[a + 3]) or tonumber(ARGV[a + 4])
  if settled and tokens then redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) end
  if settled and tokens and redis.call('EXISTS', leases) == 0 then
    -- the last call that could settle on it did: the state lapses once its TATs have passed
    if redis.call('EXISTS', state) == 1 then redis.call('EXPIRE', state, seconds) end
  elseif changed and redis.call('TTL', state) < seconds then
    redis.call('EXPIRE', state, seconds)  -- never shorter (calls in flight may settle on it)
  end
end
return 1
