-- Bring a route's limits down to what the provider reported (never up).
-- Mirrors ratelimit.policy.learn.
-- KEYS: three per limit (state hash, queue, leases; see reserve.lua).
-- ARGV: 1 clock offset, 2-5 remaining requests, tokens, input tokens, output tokens ('' for
--   unknown), 6 pause seconds (''); then 6 per limit: rpm, tpm, input tpm, output tpm ('' for
--   none), period, horizon (the seconds of its allowance a provider's hint speaks for:
--   RateLimit.hint_horizon, its capacity or for a longer period a minute's share of it).
-- A pause also sets the state's 'p', the instant it ends: no call goes before it (reserve.lua),
-- whatever the limit's period, at no cost to its allowance.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[1])
local left = {tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local pause = tonumber(ARGV[6])
local fields = {'r', 't', 'i', 'o'}
for c = 1, #KEYS / 3 do
  local a = 6 + (c - 1) * 6
  local period, horizon = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local state = KEYS[3 * c - 2]
  local saved = redis.call('HMGET', state, 'r', 't', 'i', 'o')
  local tats = {}
  for q = 1, 4 do
    tats[q] = tonumber(saved[q]) or 0
    local limit = tonumber(ARGV[a + q])
    if limit then
      if left[q] then
        tats[q] = math.max(tats[q], now + horizon - left[q] * period / limit)
      end
      if pause then tats[q] = math.max(tats[q], now + horizon + pause) end
    end
  end
  for q = 1, 4 do redis.call('HSET', state, fields[q], string.format('%.6f', tats[q])) end
  local last = math.max(tats[1], tats[2], tats[3], tats[4])
  if pause then
    local paused = math.max(tonumber(redis.call('HGET', state, 'p')) or 0, now + pause)
    redis.call('HSET', state, 'p', string.format('%.6f', paused))
    last = math.max(last, paused)
  end
  -- at most 2^31 s: EXPIRE refuses what overflows its clock (a script error reads as Redis down);
  -- never shorter than it was (calls in flight may still settle on it)
  local seconds = math.min(2147483647, math.max(1, math.ceil(last - now) + 1))
  if redis.call('TTL', state) < seconds then redis.call('EXPIRE', state, seconds) end
end
return 1
