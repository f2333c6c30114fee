-- Record a finished call's outcome. Mirrors llmguard_sdk.breaker.policy.record.
-- KEYS[1]  the route's state hash (z = the end of a 429's pause), KEYS[2] the window's hash, whose size never depends on the
--          traffic: n = calls in the window, f = failures, w = slow calls (running totals);
--          count windows: i = the ring's next slot, fields '0' .. 'window - 1' = the codes of
--          the last calls (0 ok, 1 failed, 2 slow);
--          time windows: e = the newest bucket's number (floor(time * buckets / window)), and
--          per bucket, in slot j = its number mod buckets: cj = calls, xj = failures, yj = slow.
-- ARGV: 1 outcome (ok/slow/fail/rate_limited), 2 hint seconds ('' if none), 3 window type
--       (count/time), 4 window, 5 minimum calls, 6 failure rate, 7 slow call rate,
--       8 open seconds, 9 backoff factor, 10 max open seconds, 11 half-open permits,
--       12 clock offset, 13 TTL, 14 buckets of a time window, 15 whether the call's permit
--       was a half-open probe ('0' no: its outcome in half-open is ignored; '1' or '' yes)
-- O(1) per call: a few fields read and written (on crossing into a new bucket, also the
-- slots of the buckets skipped, at most ARGV[14]). Returns the state afterwards.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[12])
local outcome, hint = ARGV[1], tonumber(ARGV[2])
local max_open = tonumber(ARGV[10])
local ttl = tonumber(ARGV[13])
local saved = redis.call('HMGET', KEYS[1], 's', 'u', 't', 'k')
local state = saved[1] or 'closed'
local open_until = tonumber(saved[2]) or 0
local trips = tonumber(saved[3]) or 0
local probes_ok = tonumber(saved[4]) or 0

local function trip()
  trips = trips + 1
  local growth = tonumber(ARGV[9]) ^ math.min(trips - 1, 64)
  local duration = math.min(max_open, tonumber(ARGV[8]) * growth)
  redis.call('HSET', KEYS[1], 's', 'open', 'u', string.format('%.6f', now + duration),
    't', trips, 'p', 0, 'k', 0, 'z', 0)
  redis.call('DEL', KEYS[2])
  redis.call('EXPIRE', KEYS[1], ttl)
  return 'open'
end

if state == 'open' or state == 'isolated' then
  return state
end
if outcome == 'rate_limited' and hint and hint > 0 then
  local until_ = math.max(open_until, now + math.min(hint, max_open))
  redis.call('HSET', KEYS[1], 's', 'open', 'u', string.format('%.6f', until_), 'p', 0,
    'z', string.format('%.6f', until_))  -- a probe that passes does not cut this pause short
  redis.call('DEL', KEYS[2])
  redis.call('EXPIRE', KEYS[1], ttl)
  return 'open'
end
local failed = outcome == 'fail' or outcome == 'rate_limited'
if state == 'half_open' then
  if ARGV[15] == '0' then
    return state  -- a late answer from before the breaker opened: not a probe's
  end
  if failed or outcome == 'slow' then  -- a slow probe: the route is still slow
    return trip()
  end
  probes_ok = probes_ok + 1
  if probes_ok >= tonumber(ARGV[11]) then
    redis.call('DEL', KEYS[1], KEYS[2])
    return 'closed'
  end
  redis.call('HSET', KEYS[1], 'k', probes_ok)
  return 'half_open'
end
local window = tonumber(ARGV[4])
local fail = failed and 1 or 0
local slow = (outcome == 'slow') and 1 or 0
local n, f, w
if ARGV[3] == 'count' then
  local size = math.floor(window)
  local saved = redis.call('HMGET', KEYS[2], 'n', 'f', 'w', 'i', 'e')
  n, f, w = tonumber(saved[1]) or 0, tonumber(saved[2]) or 0, tonumber(saved[3]) or 0
  local i = tonumber(saved[4]) or 0
  if saved[5] or n > size or i >= size then  -- a window of another policy: start afresh
    redis.call('DEL', KEYS[2])
    n, f, w, i = 0, 0, 0, 0
  end
  if n == size then  -- full: the oldest code drops out of the ring
    local gone = tonumber(redis.call('HGET', KEYS[2], i)) or 0
    if gone == 1 then f = f - 1 elseif gone == 2 then w = w - 1 end
  else
    n = n + 1
  end
  f, w = f + fail, w + slow
  redis.call('HSET', KEYS[2], 'n', n, 'f', f, 'w', w, 'i', (i + 1) % size, i, fail + 2 * slow)
else
  local buckets = tonumber(ARGV[14])
  local bucket = math.floor(now * buckets / window)
  local slot = bucket % buckets
  local saved = redis.call('HMGET', KEYS[2], 'n', 'f', 'w', 'e',
    'c' .. slot, 'x' .. slot, 'y' .. slot)
  n, f, w = tonumber(saved[1]) or 0, tonumber(saved[2]) or 0, tonumber(saved[3]) or 0
  local head = tonumber(saved[4])
  local c, x, y = tonumber(saved[5]) or 0, tonumber(saved[6]) or 0, tonumber(saved[7]) or 0
  local cleared = {}
  if head == nil or bucket - head >= buckets then  -- empty, or every bucket is too old
    if saved[1] then redis.call('DEL', KEYS[2]) end
    n, f, w, c, x, y = 0, 0, 0, 0, 0, 0
  elseif bucket > head then
    -- buckets head+1 .. bucket reuse the slots of buckets that have left the window
    local fields = {}
    for k = head + 1, bucket - 1 do
      local j = k % buckets
      fields[#fields + 1] = 'c' .. j
      fields[#fields + 1] = 'x' .. j
      fields[#fields + 1] = 'y' .. j
    end
    if #fields > 0 then
      local old = redis.call('HMGET', KEYS[2], unpack(fields))
      for m = 1, #fields, 3 do
        n = n - (tonumber(old[m]) or 0)
        f = f - (tonumber(old[m + 1]) or 0)
        w = w - (tonumber(old[m + 2]) or 0)
        cleared[#cleared + 1] = fields[m]
        cleared[#cleared + 1] = 0
        cleared[#cleared + 1] = fields[m + 1]
        cleared[#cleared + 1] = 0
        cleared[#cleared + 1] = fields[m + 2]
        cleared[#cleared + 1] = 0
      end
    end
    n, f, w, c, x, y = n - c, f - x, w - y, 0, 0, 0
  elseif bucket < head then  -- the clock stepped back: count it in the newest bucket
    bucket, slot = head, head % buckets
    local current = redis.call('HMGET', KEYS[2], 'c' .. slot, 'x' .. slot, 'y' .. slot)
    c, x, y = tonumber(current[1]) or 0, tonumber(current[2]) or 0, tonumber(current[3]) or 0
  end
  n, f, w = n + 1, f + fail, w + slow
  redis.call('HSET', KEYS[2], 'n', n, 'f', f, 'w', w, 'e', string.format('%.0f', bucket),
    'c' .. slot, c + 1, 'x' .. slot, x + fail, 'y' .. slot, y + slow, unpack(cleared))
end
redis.call('EXPIRE', KEYS[2], ttl)
if n < tonumber(ARGV[5]) then
  return 'closed'
end
if f / n >= tonumber(ARGV[6]) or w / n >= tonumber(ARGV[7]) then
  return trip()
end
return 'closed'
