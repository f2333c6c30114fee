-- Read one cache entry and mark it most recently used (not with ARGV[4] 'peek'); forget ids
-- whose entry has expired.
-- KEYS[1] entry key, KEYS[2] LRU sorted set, KEYS[3] use counter, KEYS[4] change log,
-- KEYS[5] hash: entry id -> index key (server-side search).
-- ARGV[1] entry id, ARGV[2] stream length, ARGV[3] vector-set key prefix, ARGV[4] 'peek' (optional).
-- Returns {entry JSON, its remaining life in ms (PTTL)}: the reader's clock need not agree
-- with the writer's.
local value = redis.call('GET', KEYS[1])
if not value then
  if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and redis.call('EXISTS', KEYS[4]) == 1 then
    -- expired: logged, so that other processes drop it from their indexes (no eviction will);
    -- not into a log that expired (it would never expire again: put.lua sets its life; its
    -- readers find their cursor trimmed once it is written again)
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', tonumber(ARGV[2]), '*', 'op', 'del', 'id', ARGV[1])
  end
  -- its vector too, whoever reads it: out of the LRU, no eviction would remove it, and a
  -- search meets it only while it is among the nearest
  local index_key = redis.call('HGET', KEYS[5], ARGV[1])
  if index_key then
    redis.call('VREM', ARGV[3] .. index_key, ARGV[1])
    redis.call('HDEL', KEYS[5], ARGV[1])
  end
  return false
end
if ARGV[4] ~= 'peek' then
  redis.call('ZADD', KEYS[2], 'XX', redis.call('INCR', KEYS[3]), ARGV[1])
end
return {value, redis.call('PTTL', KEYS[1])}
