-- Delete every entry of one cache namespace and log a clear.
-- KEYS[1] LRU sorted set, KEYS[2] change log, KEYS[3] use counter. ARGV[1] entry key prefix, ARGV[2] stream length.
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #ids do
  redis.call('DEL', ARGV[1] .. ids[i])
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', tonumber(ARGV[2]), '*', 'op', 'clear')
return #ids
