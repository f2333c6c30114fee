-- Reserve requests and tokens on one key, all or nothing. Mirrors ratelimit.policy.reserve.
-- KEYS[1]  the key's hash (r = request TAT, t = token TAT)
-- ARGV: 1 rpm ('' if none), 2 tpm ('' if none), 3 period, 4 requests, 5 tokens,
--       6 clock offset (0 outside tests), 7 share of the period this call may use,
--       8 seconds the call may wait for a slot
-- Returns {allowed (0/1), retry_after as a string, wait as a string}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[6])
local rpm, tpm, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local requests, tokens = tonumber(ARGV[4]), tonumber(ARGV[5])
local share, patience = tonumber(ARGV[7]), tonumber(ARGV[8])
local capacity = period * share
local saved = redis.call('HMGET', KEYS[1], 'r', 't')
local request_tat, token_tat = tonumber(saved[1]) or 0, tonumber(saved[2]) or 0
local over = 0
local new_request_tat, new_token_tat = request_tat, token_tat
if rpm then
  new_request_tat = math.max(request_tat, now) + requests * period / rpm
  over = math.max(over, new_request_tat - now - capacity)
end
if tpm then
  if tokens > tpm * share then
    return {0, 'inf', '0'}
  end
  new_token_tat = math.max(token_tat, now) + tokens * period / tpm
  over = math.max(over, new_token_tat - now - capacity)
end
if over > patience + 1e-9 then
  return {0, string.format('%.6f', over), '0'}
end
redis.call('HSET', KEYS[1], 'r', string.format('%.6f', new_request_tat),
  't', string.format('%.6f', new_token_tat))
redis.call('EXPIRE', KEYS[1], math.ceil(period * 2 + patience))
return {1, '0', string.format('%.6f', math.max(0, over))}
