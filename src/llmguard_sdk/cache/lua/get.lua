-- Read one cache entry and mark it most recently used; forget ids whose entry has expired.
-- KEYS[1] entry key, KEYS[2] LRU sorted set, KEYS[3] use counter. ARGV[1] entry id.
local value = redis.call('GET', KEYS[1])
if not value then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
redis.call('ZADD', KEYS[2], 'XX', redis.call('INCR', KEYS[3]), ARGV[1])
return value
