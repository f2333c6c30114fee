-- Delete a page of one cache namespace's entries, least recently used first; once none is
-- left, delete the rest of its keys and log a clear. Called until it says it is done: one
-- script over 100k entries held Redis for half a second.
-- KEYS[1] LRU sorted set, KEYS[2] change log, KEYS[3] use counter, KEYS[4] hash: entry id ->
-- index key (server-side search). ARGV[1] entry key prefix, ARGV[2] stream length,
-- ARGV[3] vector-set key prefix, ARGV[4] entries per page (0: all at once).
-- Returns {entries deleted, 1 when done else 0}.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[4] or '0') - 1)
for i = 1, #ids do
  redis.call('DEL', ARGV[1] .. ids[i])
end
for i = 1, #ids, 1000 do
  redis.call('ZREM', KEYS[1], unpack(ids, i, math.min(i + 999, #ids)))
end
if redis.call('ZCARD', KEYS[1]) > 0 then
  return {#ids, 0}
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
-- Logged for the readers of the log (where there is none, every entry logged expired and
-- there is nothing to clear; a log written here would never expire: put.lua sets its life).
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', tonumber(ARGV[2]), '*', 'op', 'clear')
end
return {#ids, 1}
