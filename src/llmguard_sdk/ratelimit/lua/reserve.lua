-- Reserve one call on every limit of a route (and its tenant), all or nothing.
-- Mirrors ratelimit.policy.reserve_all.
-- KEYS: three per limit: its state hash (r, t, i, o = the TATs of requests, tokens, input
--   and output tokens; p = the instant a provider's pause ends), its queue (zset: call id -> instant it stops waiting), its leases
--   (zset: call id -> instant the lease lapses: the calls holding a concurrency slot, and
--   with token limits each call that has yet to settle).
-- ARGV: 1 clock offset (0 outside tests), 2 requests, 3 tokens, 4 input tokens, 5 output
--   tokens, 6 call id, 7 seconds a queued call waits before asking again; then 10 per limit:
--   rpm, tpm, input tpm, output tpm ('' for none), period, capacity (seconds of allowance
--   this call may use), patience (seconds it may wait), concurrency (''), max queue (''),
--   lease seconds.
-- Returns {allowed 0/1, retry_after, wait, reason, lease ('' for none), queued 0/1}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000 + tonumber(ARGV[1])
local costs = {tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local call, poll = ARGV[6], ARGV[7]
local cells, width, eps = #KEYS / 3, 10, 1e-9
local function fmt(x) return string.format('%.6f', x) end
local function arg(c, i) return ARGV[7 + (c - 1) * width + i] end
-- a key's TTL to outlive instant `last`: at most 2^31 s (EXPIRE refuses what overflows its
-- clock, and a script error reads as Redis down)
local function ttl(last) return math.min(2147483647, math.max(1, math.ceil(last - now) + 1)) end
-- never shorten a key's life: other calls in flight may still settle on it
local function keep(key, seconds)
  if redis.call('TTL', key) < seconds then redis.call('EXPIRE', key, seconds) end
end
local function expire_zset(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then
    redis.call('EXPIRE', key, ttl(tonumber(top[2])))
  end
end
local wait, plans, full, any_full = 0, {}, {}, false
for c = 1, cells do
  local period, capacity = tonumber(arg(c, 5)), tonumber(arg(c, 6))
  local saved = redis.call('HMGET', KEYS[3 * c - 2], 'r', 't', 'i', 'o', 'p')
  local tats, over = {}, math.max(0, (tonumber(saved[5]) or 0) - now)
  for q = 1, 4 do
    tats[q] = tonumber(saved[q]) or 0
    local limit = tonumber(arg(c, q))
    if limit then
      local interval = period / limit
      if costs[q] * interval > capacity + eps then
        return {0, 'inf', '0', 'never', '', 0}
      end
      tats[q] = math.max(tats[q], now) + costs[q] * interval
      over = math.max(over, tats[q] - now - capacity)
    end
  end
  if over > tonumber(arg(c, 7)) + eps then
    return {0, fmt(over), '0', 'rate', '', 0}
  end
  wait = math.max(wait, over)
  plans[c] = tats
  full[c] = false
  local concurrency = tonumber(arg(c, 8))
  if concurrency then
    local leases = KEYS[3 * c]
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
    local held = redis.call('ZCARD', leases)
    if redis.call('ZSCORE', leases, call) then held = held - 1 end
    -- a call not yet waiting for a slot leaves a free one to the calls that are (a later
    -- call does not overtake them between their asks), a waiting call to those ahead of it
    -- in the queue (whose wait ends first; ties: the smaller id); a queued call holding a
    -- lease waits for the rate, not for a slot (as ratelimit._slots.slots_taken)
    local queue = KEYS[3 * c - 1]
    redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)
    local place = redis.call('ZRANK', queue, call)
    if held < concurrency and place ~= 0 then
      for _, other in ipairs(redis.call('ZRANGE', queue, 0, place and place - 1 or -1)) do
        if not redis.call('ZSCORE', leases, other) then held = held + 1 end
        if held >= concurrency then break end
      end
    end
    if held >= concurrency then
      full[c] = true
      any_full = true
    end
  end
end
if any_full then
  -- every slot taken: join the queue to ask again, or be shed
  local patience = math.huge
  for c = 1, cells do
    if full[c] then patience = math.min(patience, tonumber(arg(c, 7))) end
  end
  if patience <= eps or call == '' then
    return {0, poll, '0', 'concurrency', '', 0}
  end
  for c = 1, cells do
    local max_queue = tonumber(arg(c, 9))
    if full[c] and max_queue then
      local queue = KEYS[3 * c - 1]
      redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)
      if not redis.call('ZSCORE', queue, call) and redis.call('ZCARD', queue) >= max_queue then
        return {0, poll, '0', 'queue', '', 0}
      end
    end
  end
  -- one place in every queue it waits in: the instant its wait ends, as it first joined one
  -- (a call waiting on several limits is in the same order on each: none waits for another
  -- that waits for it)
  local till
  for c = 1, cells do
    local queue = KEYS[3 * c - 1]
    redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)  -- waits over (with or without max_queue)
    local before = tonumber(redis.call('ZSCORE', queue, call))
    if before and (not till or before < till) then till = before end
  end
  till = till or now + patience
  for c = 1, cells do
    local queue = KEYS[3 * c - 1]
    if full[c] then
      redis.call('ZADD', queue, till, call)
      expire_zset(queue)
    else  -- a slot is free for it here: the calls behind it may take it meanwhile
      redis.call('ZREM', queue, call)
    end
  end
  return {0, poll, '0', 'concurrency', '', 1}
end
if wait > eps then
  for c = 1, cells do
    local max_queue = tonumber(arg(c, 9))
    if max_queue then
      local queue = KEYS[3 * c - 1]
      redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)
      local waiting = redis.call('ZCARD', queue)
      if redis.call('ZSCORE', queue, call) then waiting = waiting - 1 end
      if waiting >= max_queue then
        return {0, fmt(wait), '0', 'queue', '', 0}
      end
    end
  end
end
local lease = ''
for c = 1, cells do
  local tats = plans[c]
  local state, queue, leases = KEYS[3 * c - 2], KEYS[3 * c - 1], KEYS[3 * c]
  redis.call('HSET', state, 'r', fmt(tats[1]), 't', fmt(tats[2]), 'i', fmt(tats[3]),
    'o', fmt(tats[4]))
  local last = math.max(tats[1], tats[2], tats[3], tats[4])
  local tokens = tonumber(arg(c, 2)) or tonumber(arg(c, 3)) or tonumber(arg(c, 4))
  if tokens then
    -- tokens are settled when the call ends: a debit on a lapsed state would be lost (the
    -- state lives until its last call settles, at the latest until that call's lease ends)
    last = math.max(last, now + wait + tonumber(arg(c, 10)))
  end
  keep(state, ttl(last))
  local max_queue = tonumber(arg(c, 9))
  if max_queue or tonumber(arg(c, 8)) then  -- a call queued for a slot leaves the queue
    redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)
    redis.call('ZREM', queue, call)
  end
  if max_queue then
    if wait > eps then
      redis.call('ZADD', queue, now + wait, call)
      expire_zset(queue)
    end
  end
  -- a lease: a concurrency slot, or (tokens) the call's hold on the state until it settles
  if (tonumber(arg(c, 8)) or tokens) and call ~= '' then
    if not tonumber(arg(c, 8)) then redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) end
    redis.call('ZADD', leases, now + wait + tonumber(arg(c, 10)), call)
    expire_zset(leases)
    lease = call
  end
end
return {1, '0', fmt(math.max(0, wait)), '', lease, 0}
