-- Correct a reservation by a number of tokens (negative: a refund). Mirrors policy.settle.
-- KEYS[1]  the key's hash; ARGV: 1 tpm, 2 period, 3 token delta, 4 clock offset
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[4])
local delta = tonumber(ARGV[3])
local token_tat = tonumber(redis.call('HGET', KEYS[1], 't')) or 0
token_tat = token_tat + delta * tonumber(ARGV[2]) / tonumber(ARGV[1])
if delta < 0 then
  token_tat = math.max(token_tat, now)
end
redis.call('HSET', KEYS[1], 't', string.format('%.6f', token_tat))
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 2))
return 1
