-- Settle a reservation to what the call cost, once (a repeated settle changes nothing).
-- KEYS: 3 per counter (see common.lua), then the reservation's "settled" marker.
-- ARGV: 1 clock offset, 2 reservation id, 3 actual cost (nano-dollars, 0 releases),
--       4 seconds to remember the settle, 5 number of counters, then PER per counter, then
--       "replay" for a settle replayed from the spend journal: it marks no alert fired (no
--       one hears of its answer), so the next settle that reaches a threshold tells it.
-- Returns {0} when already settled, else {1, then per counter: spent, resets_at, fired}.
local n = tonumber(ARGV[5])
local replay = ARGV[6 + n * PER] == 'replay'
local marker = KEYS[n * 3 + 1]
if redis.call('EXISTS', marker) == 1 then
  return {0}
end
redis.call('SET', marker, '1', 'EX', math.ceil(tonumber(ARGV[4])))
local actual = tonumber(ARGV[3])
local out = {1}
for i = 1, n do
  local c = counter(i, 6)
  bring(c)
  local held = tonumber(redis.call('HGET', c.h, 'h:' .. ARGV[2]))
  if held then
    c.reserved = c.reserved - held
    redis.call('HDEL', c.h, 'h:' .. ARGV[2])
    redis.call('ZREM', c.e, ARGV[2])
    redis.call('HSET', c.h, 'r', string.format('%d', c.reserved))
  end
  if actual > 0 then
    if c.kind == 'rolling' then
      local index = math.floor(now / (c.seconds / BUCKETS))
      redis.call('HINCRBY', c.b, string.format('%d', index), string.format('%d', actual))
      bring(c)
    else
      c.spent = c.spent + actual
      redis.call('HSET', c.h, 's', string.format('%d', c.spent))
    end
  end
  local fired = {}
  for _, a in ipairs(c.alerts) do
    if not replay and c.spent > 0 and c.spent >= tonumber(a) * c.limit
      and redis.call('HSETNX', c.h, 'a:' .. a, 1) == 1 then
      fired[#fired + 1] = a
    end
  end
  keep(c, 0)
  out[#out + 1] = string.format('%d', c.spent)
  out[#out + 1] = string.format('%.6f', c.resets)
  out[#out + 1] = table.concat(fired, ',')
end
return out
