-- Ask a route's breaker for a permit. Mirrors llmguard_sdk.breaker.policy.acquire.
-- KEYS[1]  the route's state hash (s = state, u = open until, t = trips, p = permits, k = probes ok)
-- ARGV[1]  half_open_permits, ARGV[2] clock offset in seconds (0 outside tests), ARGV[3] TTL,
--          ARGV[4] open seconds (after which the permits of lost probes are handed out again)
-- (h = when the breaker turned half-open, g = when its last probe permit was handed out)
-- (z = the end of a 429's pause)
-- Returns {allowed (0/1), state, retry_after as a string, paused (0/1): a refusal during a
-- 429's pause, which a background probe cannot end}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[2])
local saved = redis.call('HMGET', KEYS[1], 's', 'u', 'p', 'g', 'k', 'h', 'z')
local state = saved[1] or 'closed'
local open_until = tonumber(saved[2]) or 0
local permits = tonumber(saved[3]) or 0
local probed_at = tonumber(saved[4]) or tonumber(saved[6]) or 0  -- (h: written before g was)
local probes_ok = tonumber(saved[5]) or 0
if state == 'isolated' then
  return {0, 'isolated', 'inf'}
end
if state == 'open' then
  if now < open_until then
    local paused = now < (tonumber(saved[7]) or 0) and 1 or 0
    return {0, 'open', string.format('%.6f', open_until - now), paused}
  end
  state = 'half_open'
  permits, probes_ok = 0, 0
  redis.call('HSET', KEYS[1], 's', 'half_open', 'p', 0, 'k', 0,
    'h', string.format('%.6f', now))
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
end
if state == 'half_open' then
  if permits >= tonumber(ARGV[1]) then
    if now - probed_at < tonumber(ARGV[4]) then
      return {0, 'half_open', '0'}
    end
    -- the probes still out have gone open seconds without an outcome (lost): their permits
    -- are handed out again; the successes already counted stay counted
    permits = probes_ok
  end
  redis.call('HSET', KEYS[1], 'p', permits + 1, 'g', string.format('%.6f', now))
  return {1, 'half_open', '0'}
end
return {1, 'closed', '0'}
