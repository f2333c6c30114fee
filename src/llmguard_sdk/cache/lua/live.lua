-- A page of the live entries, least recently used first, for a reader whose change stream was
-- trimmed (read.lua). KEYS[1] LRU sorted set (score: a use counter, unique per use); ARGV[1]
-- the last score read ('-inf' at first), ARGV[2] how many, ARGV[3] entry key prefix.
-- Returns {last score, {entry JSON, ...}, ids read, {each entry's remaining life in ms (PTTL),
-- ...}} (an id whose entry expired is skipped). Paging by
-- score rather than by rank: an eviction meanwhile shifts ranks, never scores.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT',
  0, tonumber(ARGV[2]))
local entries = {}
local lives = {}
local last = ARGV[1]
for i = 1, #ids, 2 do
  last = ids[i + 1]
  local value = redis.call('GET', ARGV[3] .. ids[i])
  if value then
    entries[#entries + 1] = value
    lives[#lives + 1] = redis.call('PTTL', ARGV[3] .. ids[i])
  end
end
return {last, entries, #ids / 2, lives}
