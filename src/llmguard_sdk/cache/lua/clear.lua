-- Clear one cache namespace a bounded step at a time; called until it says it is done (one
-- script over 100k entries held Redis for half a second, past a socket timeout).
-- Each call does one step: while the hash of vectors (server-side search) exists, a page of
-- its fields (HSCAN from the cursor given), deleting each vector set they name, up to a
-- number of vectors freed (a set larger than that alone in its step: Redis frees a vector
-- set in one go, DEL or UNLINK); then a page of entries, least recently used first; once
-- none is left, the rest of the keys, and the clear is logged.
-- KEYS[1] LRU sorted set, KEYS[2] change log, KEYS[3] use counter, KEYS[4] hash: entry id ->
-- index key (server-side search), KEYS[5] where the vectors are kept (put.lua's mark).
-- ARGV[1] entry key prefix, ARGV[2] stream length, ARGV[3] vector-set key prefix, ARGV[4]
-- entries (and hash fields) per page (0: everything at once), ARGV[5] the hash's scan cursor
-- ('0' at first), ARGV[6] vectors freed per call at most (but one set).
-- Returns {entries or fields deleted, 1 when done else 0, the next scan cursor}.
local page = tonumber(ARGV[4])
local function delete_fields(fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', KEYS[4], unpack(fields, i, math.min(i + 999, #fields)))
  end
end
if page > 0 and redis.call('EXISTS', KEYS[4]) == 1 then
  -- Vectors first: a search meanwhile finds none, rather than meeting the entries deleted
  -- below one by one (each met is a VREM, far dearer than freeing its set).
  local budget = tonumber(ARGV[6])
  local found = redis.call('HSCAN', KEYS[4], ARGV[5], 'COUNT', page)
  local pairs_found = found[2]
  local done, freed, deleted = {}, 0, {}
  for i = 1, #pairs_found, 2 do
    if #done == page then  -- (a small hash, a listpack, is read whole: 512 fields or so)
      delete_fields(done)
      return {#done, 0, ARGV[5]}
    end
    local vset = ARGV[3] .. pairs_found[i + 1]
    if not deleted[vset] then
      local size = redis.call('VCARD', vset)
      if freed > 0 and freed + size > budget then
        -- the same cursor again: the fields left are read again (the done ones are gone)
        delete_fields(done)
        return {#done, 0, ARGV[5]}
      end
      if size > 0 then
        redis.call('DEL', vset)
      end
      deleted[vset] = true
      freed = freed + size
    end
    done[#done + 1] = pairs_found[i]
  end
  delete_fields(done)
  -- from the start again when the scan ended with fields left (written meanwhile)
  return {#done, 0, found[1]}
end
local ids = redis.call('ZRANGE', KEYS[1], 0, page - 1)
for i = 1, #ids do
  redis.call('DEL', ARGV[1] .. ids[i])
end
for i = 1, #ids, 1000 do
  redis.call('ZREM', KEYS[1], unpack(ids, i, math.min(i + 999, #ids)))
end
if redis.call('ZCARD', KEYS[1]) > 0 then
  return {#ids, 0, '0'}
end
if page == 0 then  -- everything at once: the vector sets the whole hash names
  local index_keys = redis.call('HVALS', KEYS[4])
  local seen = {}
  for i = 1, #index_keys do
    if not seen[index_keys[i]] then
      seen[index_keys[i]] = true
      redis.call('DEL', ARGV[3] .. index_keys[i])
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5])  -- (either kind may write now)
-- Logged for the readers of the log (where there is none, every entry logged expired and
-- there is nothing to clear; a log written here would never expire: put.lua sets its life).
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', tonumber(ARGV[2]), '*', 'op', 'clear')
end
return {#ids, 1, '0'}
