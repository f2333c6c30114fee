-- Delete one cache entry (an answer found wrong or out of date), for every process: out of
-- the LRU, its vector out of its partition's vector set (server-side search), and a 'del'
-- in the change log so that the other processes drop it from their indexes.
-- KEYS[1] entry key, KEYS[2] LRU sorted set, KEYS[3] change log, KEYS[4] hash: entry id ->
-- index key (server-side search).
-- ARGV[1] entry id, ARGV[2] stream length, ARGV[3] vector-set key prefix.
-- Returns 1 when the entry was held (fresh or stale), else 0.
local held = redis.call('DEL', KEYS[1])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and redis.call('EXISTS', KEYS[3]) == 1 then
  -- (not into a log that expired: put.lua sets its life, as get.lua says)
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', tonumber(ARGV[2]), '*', 'op', 'del', 'id', ARGV[1])
end
local index_key = redis.call('HGET', KEYS[4], ARGV[1])
if index_key then
  redis.call('VREM', ARGV[3] .. index_key, ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
end
return held
