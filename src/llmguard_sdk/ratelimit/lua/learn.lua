-- Bring a key's state down to what the provider reported. Mirrors ratelimit.policy.learn.
-- KEYS[1] the key's hash; ARGV: 1 rpm (''), 2 tpm (''), 3 period, 4 remaining requests (''),
-- 5 remaining tokens (''), 6 pause seconds (''), 7 clock offset
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[7])
local rpm, tpm, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local left_requests, left_tokens, pause = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local saved = redis.call('HMGET', KEYS[1], 'r', 't')
local request_tat, token_tat = tonumber(saved[1]) or 0, tonumber(saved[2]) or 0
if rpm then
  if left_requests then
    request_tat = math.max(request_tat, now + period - left_requests * period / rpm)
  end
  if pause then request_tat = math.max(request_tat, now + period + pause) end
end
if tpm then
  if left_tokens then
    token_tat = math.max(token_tat, now + period - left_tokens * period / tpm)
  end
  if pause then token_tat = math.max(token_tat, now + period + pause) end
end
redis.call('HSET', KEYS[1], 'r', string.format('%.6f', request_tat),
  't', string.format('%.6f', token_tat))
redis.call('EXPIRE', KEYS[1], math.ceil(period * 2 + (pause or 0)))
return 1
