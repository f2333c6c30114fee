-- Lease one call on a deployment of a group: its calls in flight are sorted sets of call ids
-- scored by the lease's deadline (Redis TIME), pruned by score at each decision, so they are
-- bounded by the calls in flight and a crashed caller's lease runs out on its own.
-- KEYS: one sorted set per deployment of the group (one hash tag).
-- ARGV[1] call id, ARGV[2] lease seconds, ARGV[3] key TTL (s, at least), ARGV[4] the deployment to
-- lease (1-based; 0: the one with the fewest calls in flight, ties from ARGV[5]),
-- ARGV[5] where ties start (0-based rotation).
-- Returns {leased (1-based), count of each deployment before this lease...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local counts = {}
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  counts[i] = redis.call('ZCARD', key)
end
local n = #KEYS
local pick = tonumber(ARGV[4])
if pick == 0 then
  local start = tonumber(ARGV[5]) % n
  for j = 0, n - 1 do
    local i = (start + j) % n + 1
    if pick == 0 or counts[i] < counts[pick] then
      pick = i
    end
  end
end
redis.call('ZADD', KEYS[pick], now + tonumber(ARGV[2]), ARGV[1])
local ttl = tonumber(ARGV[3])
if redis.call('TTL', KEYS[pick]) < ttl then  -- never cut the life of a longer lease held there
  redis.call('EXPIRE', KEYS[pick], ttl)
end
local reply = {pick}
for i = 1, n do
  reply[i + 1] = counts[i]
end
return reply
