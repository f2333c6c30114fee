-- Give back a half-open probe permit whose call has no outcome to record.
-- Mirrors llmguard_sdk.breaker.policy.release. KEYS[1] the route's state hash; ARGV[1] '0'
-- when the permit was no probe (taken before the breaker opened: nothing to give back).
local saved = redis.call('HMGET', KEYS[1], 's', 'p')
local permits = tonumber(saved[2]) or 0
if saved[1] == 'half_open' and permits > 0 and ARGV[1] ~= '0' then
  redis.call('HSET', KEYS[1], 'p', permits - 1)
end
return 1
