-- Shared by every budget script (prepended to each). Mirrors llmguard_sdk.budget.policy.
-- Per counter the caller passes 3 keys: the counter hash (w = window id, s = spent,
-- r = reserved, h:<id> = a reservation's amount, a:<threshold> = alert fired, x = the spend a
-- refusal fired the 100 % alert at), the sorted set
-- of reservation expiries, and the hash of rolling-window buckets; and PER arguments from
-- ARGV[first]: limit (nano-dollars), window kind, rolling seconds, alert thresholds
-- (comma-separated), seconds the keys must outlive the window, the edges of a window on a
-- local calendar (comma-separated epoch seconds, "," for UTC's: see budget/_zones.py) and
-- its time zone.
-- ARGV[1] is the clock offset (0 outside tests): Redis TIME is the clock.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[1])
local BUCKETS = 60
local PER = 7  -- arguments per counter
local SECONDS = {minute = 60, hour = 3600, day = 86400}

local function days_from_civil(y, m)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function month_bounds(t)
  local z = math.floor(t / 86400) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return y * 12 + m - 1, days_from_civil(ny, nm) * 86400
end

local function split(csv)
  local out = {}
  for part in string.gmatch(csv, '[^,]+') do out[#out + 1] = part end
  return out
end

-- The counter i (1-based): its keys and spec.
local function counter(i, first)
  local a = first + (i - 1) * PER
  local edges = {}
  for _, edge in ipairs(split(ARGV[a + 5])) do edges[#edges + 1] = tonumber(edge) end
  return {
    h = KEYS[(i - 1) * 3 + 1], e = KEYS[(i - 1) * 3 + 2], b = KEYS[(i - 1) * 3 + 3],
    limit = tonumber(ARGV[a]), kind = ARGV[a + 1], seconds = tonumber(ARGV[a + 2]),
    alerts = split(ARGV[a + 3]), keep = tonumber(ARGV[a + 4]), edges = edges, tz = ARGV[a + 6]
  }
end

-- Roll the window, drop expired reservations and old buckets: sets c.spent, c.reserved,
-- c.resets (mirrors policy.bring_to_now).
local function bring(c)
  local saved = redis.call('HMGET', c.h, 'w', 's', 'r')
  local spent, reserved = tonumber(saved[2]) or 0, tonumber(saved[3]) or 0
  local expired = redis.call('ZRANGEBYSCORE', c.e, '-inf', string.format('%.6f', now))
  if #expired > 0 then
    for _, id in ipairs(expired) do
      local amount = tonumber(redis.call('HGET', c.h, 'h:' .. id))
      if amount then
        reserved = reserved - amount
        redis.call('HDEL', c.h, 'h:' .. id)
      end
    end
    redis.call('ZREMRANGEBYSCORE', c.e, '-inf', string.format('%.6f', now))
    redis.call('HSET', c.h, 'r', string.format('%d', reserved))
  end
  if c.kind == 'rolling' then
    local width = c.seconds / BUCKETS
    local current = math.floor(now / width)
    local all = redis.call('HGETALL', c.b)
    local oldest = nil
    spent = 0
    for j = 1, #all, 2 do
      local index = tonumber(all[j])
      -- (kept BUCKETS + 1 widths: spend late in its bucket counts a whole window too)
      if index < current - BUCKETS then
        redis.call('HDEL', c.b, all[j])
      else
        spent = spent + tonumber(all[j + 1])
        if oldest == nil or index < oldest then oldest = index end
      end
    end
    c.resets = oldest and (oldest + BUCKETS + 1) * width or now
    -- x: the spend a refusal fired 100 % at; that alert re-arms when the spend falls under it
    local full_at = tonumber(redis.call('HGET', c.h, 'x'))
    for _, a in ipairs(c.alerts) do
      local held = tonumber(a) == 1 and full_at and spent >= full_at
      if spent < tonumber(a) * c.limit and not held then
        redis.call('HDEL', c.h, 'a:' .. a)
        if tonumber(a) == 1 then redis.call('HDEL', c.h, 'x') end
      end
    end
  else
    local id, resets
    if #c.edges > 0 then
      -- a day or month on a local calendar: of the windows around the process's clock, the
      -- one that holds now (the nearest of them for a clock a whole window away), its
      -- start for id
      local e, at = c.edges, 1
      while at < #e - 1 and now >= e[at + 1] do at = at + 1 end
      id, resets = e[at], e[at + 1]
    elseif c.kind == 'month' then
      id, resets = month_bounds(now)
    else
      local seconds = SECONDS[c.kind]
      id = math.floor(now / seconds)
      resets = (id + 1) * seconds
    end
    c.resets = resets
    if tonumber(saved[1]) ~= id then
      spent = 0
      redis.call('HSET', c.h, 'w', string.format('%d', id), 's', 0)
      for _, a in ipairs(c.alerts) do redis.call('HDEL', c.h, 'a:' .. a) end
    end
  end
  c.spent, c.reserved = spent, reserved
end

-- Keep the counter's keys as long as its window and any reservation may need them.
local function keep(c, hold_seconds)
  local seconds = (c.kind == 'rolling') and c.seconds * (BUCKETS + 1) / BUCKETS
    or math.max(0, c.resets - now)
  -- at most 2^31 s: EXPIRE refuses what overflows its clock (a script error reads as Redis down)
  local ttl = math.min(2147483647, math.ceil(seconds + hold_seconds + c.keep))
  for _, key in ipairs({c.h, c.e, c.b}) do
    if redis.call('TTL', key) < ttl then redis.call('EXPIRE', key, ttl) end
  end
end
