-- Store one cache entry, mark it most recently used, log it, evict the least recently used.
-- KEYS[1] entry key, KEYS[2] LRU sorted set (score: a use counter, KEYS[4]), KEYS[3] change
-- log (stream), KEYS[5] hash: entry id -> index key (server-side search only), KEYS[6] where
-- the namespace's vectors are kept ('server' or 'local', vectors.lua); one hash tag.
-- ARGV: entry id, entry JSON, time to live (ms), max entries, entry key prefix,
--       index key, vector (base64), stale_until (s), stream length,
--       vector-set key prefix, vector (FP32 blob: server-side search only),
--       entries evicted at most (a namespace far over max entries, the bound lowered or a
--       process with a lower one sharing it, shrinks over the next stores, not in one script).
-- The change logged carries the time to live ('ttl', ms): a reader counts it from the
-- message's id (this server's clock), not from 'until' (the writer's clock).
-- Every key written lives as long as the longest-lived entry written to it: a namespace (or a
-- partition, a tenant) idle past its entries' time to live leaves nothing behind. A reader of
-- a change log that expired and was written again finds its cursor trimmed (read.lua).
local ttl = tonumber(ARGV[3])
local function outlive(key)
  local left = redis.call('PTTL', key)
  if left == -1 or left < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
local vsets = ARGV[10]
-- A namespace keeps its vectors in one place: a writer of the other kind is refused before
-- anything is written (its entries could never be found by similarity where they are read).
-- (A server-side writer sends its vector as ARGV[11] alone, a local one as ARGV[7] alone.)
local kind = ''
if ARGV[11] ~= '' then
  kind = 'server'
elseif ARGV[7] ~= '' then
  kind = 'local'
end
local marked = false
if kind ~= '' then
  marked = redis.call('GET', KEYS[6])
  if not marked and kind == 'local' and redis.call('EXISTS', KEYS[5]) == 1 then
    marked = 'server'  -- (written before the mark)
  end
  if marked and marked ~= kind then
    return redis.error_reply('LLMGUARD-VECTORS ' .. marked)
  end
end
if kind == 'server' then
  -- First, so that a server without vector sets fails the script before it writes anything.
  local vset = vsets .. ARGV[6]
  redis.call('VADD', vset, 'FP32', ARGV[11], ARGV[1], 'NOQUANT')
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[6])
  outlive(vset)
  outlive(KEYS[5])
end
if kind ~= '' then
  if not marked then
    redis.call('SET', KEYS[6], kind)
  end
  outlive(KEYS[6])
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[1])
local maxlen = tonumber(ARGV[9])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*',
  'op', 'put', 'id', ARGV[1], 'ix', ARGV[6], 'v', ARGV[7], 'until', ARGV[8], 'ttl', ARGV[3])
outlive(KEYS[2])
outlive(KEYS[3])
outlive(KEYS[4])
local evicted = {}
local extra = math.min(redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4]), tonumber(ARGV[12]))
if extra > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], extra)
  for i = 1, #oldest, 2 do
    local id = oldest[i]
    redis.call('DEL', ARGV[5] .. id)
    -- its vector too, whoever evicts it (a writer without server-side search included)
    local index_key = redis.call('HGET', KEYS[5], id)
    if index_key then
      redis.call('VREM', vsets .. index_key, id)
      redis.call('HDEL', KEYS[5], id)
    end
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '*', 'op', 'del', 'id', id)
    evicted[#evicted + 1] = id
  end
end
return evicted
