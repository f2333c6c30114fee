-- Move a canary to another stage if nobody moved it first (compare and set on the version);
-- a new stage starts with empty counters.
-- KEYS[1] the stage hash, KEYS[2] the control's counters, KEYS[3] the canary's (one hash tag)
-- ARGV: 1 expected version, 2 new index, 3 new status, 4 reason, 5 TTL seconds,
--       6 candidate id the move is for ('' : whichever is stored)
-- Returns {applied (0/1), version, index, status, candidate, reason, changed_at}.
local clock = redis.call('TIME')
local now = string.format('%.6f', tonumber(clock[1]) + tonumber(clock[2]) / 1000000)
local s = redis.call('HMGET', KEYS[1], 'v', 'i', 'st', 'cand', 'why', 'at')
if not s[1] or tonumber(s[1]) ~= tonumber(ARGV[1]) or (ARGV[6] ~= '' and ARGV[6] ~= s[4]) then
  return {0, s[1] or '0', s[2] or '0', s[3] or 'canary', s[4] or '', s[5] or '', s[6] or '0'}
end
local v = tonumber(s[1]) + 1
redis.call('HSET', KEYS[1], 'v', v, 'i', ARGV[2], 'st', ARGV[3], 'why', ARGV[4], 'at', now)
if ARGV[3] ~= 'rolled_back' then  -- a rollback keeps its evidence for `llmguard release status`
  redis.call('DEL', KEYS[2], KEYS[3])
end
for k = 1, 3 do  -- a move renews the canary's life (a rollback's counters' too)
  redis.call('EXPIRE', KEYS[k], tonumber(ARGV[5]))
end
return {1, tostring(v), ARGV[2], ARGV[3], s[4], ARGV[4], now}
