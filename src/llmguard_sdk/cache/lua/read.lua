-- Read the change stream after a cursor (what other processes stored, evicted or cleared).
-- KEYS[1] the change log (stream). ARGV[1] the last id read ('0-0' at first), ARGV[2] how many.
-- Returns {0, '', messages, now} with the messages {{id, {field, value, ...}}, ...} (empty
-- when there are none) and this server's clock in ms (TIME: a put's 'ttl' counts from its
-- message id, on the same clock); or {1, last id, {}, now} when changes after the cursor may
-- have been trimmed from the stream: a new reader ('0-0') of a stream that lost entries (a
-- process started after more changes than the stream keeps), or a reader whose last id read
-- was trimmed (it fell behind). The reader then loads the live entries themselves (live.lua)
-- and reads on from that last id. (A Redis before 7.0 does not count what was added: a new reader there
-- reads the stream as it is.) A reader that read the stream once ('0-0' no more) and finds it
-- gone gets {1, '0-0', {}, now}: it expired with the longest-lived entry logged to it (put.lua),
-- so every entry the reader indexed from it is dead; it reads the next stream from its start.
local function after(a, b)  -- whether stream id a comes after stream id b
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  a_ms, a_seq, b_ms, b_seq = tonumber(a_ms), tonumber(a_seq), tonumber(b_ms), tonumber(b_seq)
  return a_ms > b_ms or (a_ms == b_ms and a_seq > b_seq)
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[1] ~= '0-0' then
    return {1, '0-0', {}, now}
  end
  return {0, '', {}, now}
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local fields = {}
for i = 1, #info, 2 do
  fields[info[i]] = info[i + 1]
end
local first = fields['first-entry']
local lost
if ARGV[1] == '0-0' then
  lost = fields['entries-added'] ~= nil and fields['entries-added'] > fields['length']
else
  lost = first and after(first[1], ARGV[1])
end
if lost then
  return {1, fields['last-generated-id'], {}, now}
end
local found = redis.call('XREAD', 'COUNT', ARGV[2], 'STREAMS', KEYS[1], ARGV[1])
if not found then
  return {0, '', {}, now}
end
return {0, '', found[1][2], now}
