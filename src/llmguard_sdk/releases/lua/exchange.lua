-- A process's canary counters added, the stage and both arms' counters read back.
-- KEYS[1] the stage hash, KEYS[2] the control's counters, KEYS[3] the canary's (one hash tag)
-- ARGV: 1 candidate id ('' : read only), 2 the stage version the counters were taken under,
--       3 TTL seconds, 4 how many control fields follow, then field, value pairs (control's,
--       then the canary's)
-- A candidate other than the stored one starts a new canary at stage 0 (counters cleared);
-- counters taken under another version (a stage since changed) are dropped.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'v', 'i', 'st', 'cand', 'why', 'at')
local cand = ARGV[1]
local ttl = tonumber(ARGV[3])
if cand ~= '' and s[4] ~= cand then
  local v = (tonumber(s[1]) or 0) + 1
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'v', v, 'i', 0, 'st', 'canary', 'cand', cand, 'why', 'new candidate',
    'at', string.format('%.6f', now))
  s = {tostring(v), '0', 'canary', cand, 'new candidate', string.format('%.6f', now)}
elseif s[1] and tonumber(ARGV[2]) == tonumber(s[1]) then
  local n = tonumber(ARGV[4])
  local i = 5
  while i < #ARGV do
    local key = KEYS[2]
    if (i - 5) / 2 >= n then key = KEYS[3] end
    redis.call('HINCRBYFLOAT', key, ARGV[i], ARGV[i + 1])
    i = i + 2
  end
end
if not s[1] then
  return {}
end
for k = 1, 3 do
  redis.call('EXPIRE', KEYS[k], ttl)
end
return {s, redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])}
