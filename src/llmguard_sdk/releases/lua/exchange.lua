-- A process's canary counters added, the stage and both arms' counters read back.
-- KEYS[1] the stage hash, KEYS[2] the control's counters, KEYS[3] the canary's (one hash tag)
-- ARGV: 1 candidate id ('' : read only: the keys' TTL is left as it is), 2 the stage version the counters were taken under,
--       3 TTL seconds, 4 how many control fields follow, 5 the caller's stage shares ('0.01,1.0',
--       stored with the candidate's canary; '' : none), 6 seconds the candidate holds the key
--       after this exchange, 7 the caller's min_calls (stored with the candidate's canary;
--       '0' : none), then field, value pairs (control's, then the canary's)
-- Returns {} (no canary), or {stage, control's counters, canary's counters, stage shares,
-- min_calls}.
-- A candidate other than the stored one waits while the stored one's hold lasts (its Guards
-- still exchange: a rolling deploy): it reads the stage and adds nothing. Once the hold lapsed
-- it starts a new canary at stage 0 (counters cleared), or takes up the stage it had when
-- another candidate replaced it;
-- counters taken under another version (a stage since changed) are dropped.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'v', 'i', 'st', 'cand', 'why', 'at', 'held')
local cand = ARGV[1]
local ttl = tonumber(ARGV[3])
local held = tonumber(s[7]) or 0
local waits = cand ~= '' and s[4] and s[4] ~= cand and now < held
if waits then
  cand = ''  -- read only
elseif cand ~= '' and s[4] ~= cand then
  -- the stage replaced is kept ('p:<candidate>' = status|index|reason, 'past' the candidates
  -- kept, oldest first, 16 at most); cand's own, when kept, is taken up again
  local v = (tonumber(s[1]) or 0) + 1
  local st, i, why = 'canary', '0', 'new candidate'
  local kept = redis.call('HGET', KEYS[1], 'p:' .. cand)
  if kept then
    local kst, ki, kwhy = string.match(kept, '^([%a_]+)|(%d+)|(.*)$')
    if kst then
      st, i, why = kst, ki, kwhy
    end
  end
  local order = {}
  for id in string.gmatch(redis.call('HGET', KEYS[1], 'past') or '', '%S+') do
    if id ~= cand and id ~= s[4] then
      order[#order + 1] = id
    end
  end
  if s[4] then
    order[#order + 1] = s[4]
    redis.call('HSET', KEYS[1], 'p:' .. s[4],
      (s[3] or 'canary') .. '|' .. (s[2] or '0') .. '|' .. (s[5] or ''))
  end
  while #order > 16 do
    redis.call('HDEL', KEYS[1], 'p:' .. table.remove(order, 1))
  end
  redis.call('HDEL', KEYS[1], 'p:' .. cand)
  redis.call('DEL', KEYS[2], KEYS[3])
  local at = string.format('%.6f', now)
  redis.call('HSET', KEYS[1], 'v', v, 'i', i, 'st', st, 'cand', cand, 'why', why, 'at', at,
    'past', table.concat(order, ' '))
  s = {tostring(v), i, st, cand, why, at}
elseif s[1] and tonumber(ARGV[2]) == tonumber(s[1]) then
  local n = tonumber(ARGV[4])
  local i = 8
  while i < #ARGV do
    local key = KEYS[2]
    if (i - 8) / 2 >= n then key = KEYS[3] end
    redis.call('HINCRBYFLOAT', key, ARGV[i], ARGV[i + 1])
    i = i + 2
  end
end
if not s[1] then
  return {}
end
if cand ~= '' then
  -- a serving Guard's exchange keeps the canary alive; a read (status, a dashboard) does not
  if ARGV[5] ~= '' then
    redis.call('HSET', KEYS[1], 'sh', ARGV[5])
  end
  if tonumber(ARGV[7]) > 0 then
    redis.call('HSET', KEYS[1], 'mc', ARGV[7])
  end
  redis.call('HSET', KEYS[1], 'held', string.format('%.6f', math.max(held, now + tonumber(ARGV[6]))))
  for k = 1, 3 do
    redis.call('EXPIRE', KEYS[k], ttl)
  end
end
return {s, redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3]),
  redis.call('HGET', KEYS[1], 'sh') or '', redis.call('HGET', KEYS[1], 'mc') or ''}
