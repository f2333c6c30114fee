-- Retry budget of one route: exponentially decaying request and retry counts.
-- Mirrors llmguard_sdk.retry.budget.deposit / spend / give_back; time comes from Redis TIME.
-- KEYS[1]  the route's budget hash (fields q, r, at)
-- ARGV[1]  "deposit", "spend" or "refund" (a retry spent, then not made)
-- ARGV[2]  ratio, ARGV[3] min_per_second, ARGV[4] window (seconds), ARGV[5] key TTL (seconds)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local ratio, floor, window = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local saved = redis.call('HMGET', KEYS[1], 'q', 'r', 'at')
local q, r = tonumber(saved[1]) or 0, tonumber(saved[2]) or 0
local at = tonumber(saved[3])
if at then
  local elapsed = now - at
  if elapsed < 0 then elapsed = 0 end
  local factor = math.exp(-elapsed / window)
  q, r = q * factor, r * factor
end
local allowed = 1
if ARGV[1] == 'deposit' then
  q = q + 1
elseif ARGV[1] == 'refund' then
  r = math.max(0, r - 1)
elseif r + 1 <= (ratio * q + floor * window) * (1 + 1e-6) + 1e-6 then
  r = r + 1
else
  allowed = 0
end
redis.call('HSET', KEYS[1], 'q', string.format('%.17g', q), 'r', string.format('%.17g', r),
  'at', string.format('%.6f', now))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
return allowed
