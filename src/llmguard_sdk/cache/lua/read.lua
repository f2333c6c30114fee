-- Read the change stream after a cursor (what other processes stored, evicted or cleared).
-- KEYS[1] the change log (stream). ARGV[1] the last id read ('0-0' at first), ARGV[2] how many.
-- Returns the messages: {{id, {field, value, ...}}, ...} (empty when there are none).
local found = redis.call('XREAD', 'COUNT', ARGV[2], 'STREAMS', KEYS[1], ARGV[1])
if not found then
  return {}
end
return found[1][2]
