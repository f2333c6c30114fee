-- Where the live entries of one cache namespace keep their vectors: 'server' (the server's
-- vector sets, vector_search='server'), 'local' (in the entries and the change stream, for
-- each process's index, vector_search='local') or '' (no entry with a vector: either may
-- start). KEYS[1] the mark put.lua keeps, KEYS[2] hash: entry id -> index key (server-side
-- search), KEYS[3] LRU sorted set. ARGV[1] entry key prefix.
-- Namespaces written before the mark: the hash says 'server'; the most recently used entry
-- holding its vector says 'local'.
local marked = redis.call('GET', KEYS[1])
if marked then
  return marked
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 'server'
end
local newest = redis.call('ZRANGE', KEYS[3], -1, -1)
if newest[1] then
  local value = redis.call('GET', ARGV[1] .. newest[1])
  if value and string.find(value, '"vector":"', 1, true) then
    return 'local'
  end
end
return ''
