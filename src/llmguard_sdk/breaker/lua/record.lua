-- Record a finished call's outcome. Mirrors llmguard_sdk.breaker.policy.record.
-- KEYS[1]  the route's state hash, KEYS[2] the window's outcome list ("time|outcome", newest first)
-- ARGV: 1 outcome (ok/slow/fail/rate_limited), 2 hint seconds ('' if none), 3 window type
--       (count/time), 4 window, 5 minimum calls, 6 failure rate, 7 slow call rate,
--       8 open seconds, 9 backoff factor, 10 max open seconds, 11 half-open permits,
--       12 clock offset, 13 TTL
-- Returns the state afterwards.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[12])
local outcome, hint = ARGV[1], tonumber(ARGV[2])
local max_open = tonumber(ARGV[10])
local ttl = tonumber(ARGV[13])
local saved = redis.call('HMGET', KEYS[1], 's', 'u', 't', 'k')
local state = saved[1] or 'closed'
local open_until = tonumber(saved[2]) or 0
local trips = tonumber(saved[3]) or 0
local probes_ok = tonumber(saved[4]) or 0

local function trip()
  trips = trips + 1
  local growth = tonumber(ARGV[9]) ^ math.min(trips - 1, 64)
  local duration = math.min(max_open, tonumber(ARGV[8]) * growth)
  redis.call('HSET', KEYS[1], 's', 'open', 'u', string.format('%.6f', now + duration),
    't', trips, 'p', 0, 'k', 0)
  redis.call('DEL', KEYS[2])
  redis.call('EXPIRE', KEYS[1], ttl)
  return 'open'
end

if state == 'open' or state == 'isolated' then
  return state
end
if outcome == 'rate_limited' and hint and hint > 0 then
  local until_ = math.max(open_until, now + math.min(hint, max_open))
  redis.call('HSET', KEYS[1], 's', 'open', 'u', string.format('%.6f', until_), 'p', 0)
  redis.call('DEL', KEYS[2])
  redis.call('EXPIRE', KEYS[1], ttl)
  return 'open'
end
local failed = outcome == 'fail' or outcome == 'rate_limited'
if state == 'half_open' then
  if failed then
    return trip()
  end
  probes_ok = probes_ok + 1
  if probes_ok >= tonumber(ARGV[11]) then
    redis.call('DEL', KEYS[1], KEYS[2])
    return 'closed'
  end
  redis.call('HSET', KEYS[1], 'k', probes_ok)
  return 'half_open'
end
redis.call('LPUSH', KEYS[2], string.format('%.6f', now) .. '|' .. outcome)
local window = tonumber(ARGV[4])
if ARGV[3] == 'count' then
  redis.call('LTRIM', KEYS[2], 0, math.floor(window) - 1)
else
  redis.call('LTRIM', KEYS[2], 0, 9999)
  while true do
    local oldest = redis.call('LINDEX', KEYS[2], -1)
    if not oldest then break end
    if tonumber(string.match(oldest, '^([^|]+)')) > now - window then break end
    redis.call('RPOP', KEYS[2])
  end
end
redis.call('EXPIRE', KEYS[2], ttl)
local entries = redis.call('LRANGE', KEYS[2], 0, -1)
local total = #entries
if total < tonumber(ARGV[5]) then
  return 'closed'
end
local failures, slow = 0, 0
for _, entry in ipairs(entries) do
  local kind = string.match(entry, '|(.+)$')
  if kind == 'fail' or kind == 'rate_limited' then failures = failures + 1 end
  if kind == 'slow' then slow = slow + 1 end
end
if failures / total >= tonumber(ARGV[6]) or slow / total >= tonumber(ARGV[7]) then
  return trip()
end
return 'closed'
