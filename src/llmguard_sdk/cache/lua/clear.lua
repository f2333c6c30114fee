-- Delete every entry of one cache namespace and log a clear.
-- KEYS[1] LRU sorted set, KEYS[2] change log, KEYS[3] use counter, KEYS[4] hash: entry id ->
-- index key (server-side search). ARGV[1] entry key prefix, ARGV[2] stream length,
-- ARGV[3] vector-set key prefix.
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #ids do
  redis.call('DEL', ARGV[1] .. ids[i])
end
local index_keys = redis.call('HVALS', KEYS[4])
local seen = {}
for i = 1, #index_keys do
  if not seen[index_keys[i]] then
    seen[index_keys[i]] = true
    redis.call('DEL', ARGV[3] .. index_keys[i])
  end
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', tonumber(ARGV[2]), '*', 'op', 'clear')
return #ids
