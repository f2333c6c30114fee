-- A background probe of an open route succeeded: end the open wait, so that the next permit
-- half-opens the breaker. Any other state (closed, half-open, isolated, none) is left alone.
-- KEYS[1]  the route's state hash (s = state, u = open until)
if redis.call('HGET', KEYS[1], 's') == 'open' then
  redis.call('HSET', KEYS[1], 'u', 0)
end
return 0
