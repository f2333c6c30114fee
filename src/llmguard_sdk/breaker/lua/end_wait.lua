-- A background probe of an open route succeeded: end the open wait, so that the next permit
-- half-opens the breaker, unless a 429 asked for a pause that has not ended (its Retry-After
-- holds). Any other state (closed, half-open, isolated, none) is left alone.
-- KEYS[1]  the route's state hash (s = state, u = open until, z = the end of a 429's pause)
local saved = redis.call('HMGET', KEYS[1], 's', 'u', 'z')
if saved[1] == 'open' then
  local paused = tonumber(saved[3]) or 0
  if paused < (tonumber(saved[2]) or 0) then
    redis.call('HSET', KEYS[1], 'u', string.format('%.6f', paused))
  end
end
return 0
