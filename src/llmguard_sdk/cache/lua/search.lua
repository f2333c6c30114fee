-- Server-side vector search in one partition's vector set (Redis 8 vector sets).
-- KEYS[1] the partition's vector set, KEYS[2] hash: entry id -> partition index key.
-- ARGV: the query vector (FP32 blob), how many, entry key prefix.
-- Returns id, score pairs (score = (1 + cosine) / 2); ids whose entry expired are removed
-- from the set and skipped. When some were, the set is searched again (3 searches at most):
-- the nearest all expired (paraphrases stored earlier) hid the live entries after them.
local wanted = tonumber(ARGV[2])
local live = {}
for _ = 1, 3 do
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return live
  end
  local found = redis.call('VSIM', KEYS[1], 'FP32', ARGV[1], 'WITHSCORES', 'COUNT', wanted)
  local removed = 0
  live = {}
  for i = 1, #found, 2 do
    local id = found[i]
    if redis.call('EXISTS', ARGV[3] .. id) == 1 then
      live[#live + 1] = id
      live[#live + 1] = found[i + 1]
    else
      redis.call('VREM', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
      removed = removed + 1
    end
  end
  if removed == 0 or #live >= 2 * wanted then
    return live
  end
end
return live
