-- Each counter's settled spend, reserved amount and reset time (expired holds dropped).
-- ARGV: 1 clock offset, 2 number of counters, then PER per counter (see common.lua).
local out = {}
for i = 1, tonumber(ARGV[2]) do
  local c = counter(i, 3)
  bring(c)
  keep(c, 0)  -- a window just brought in must expire too
  out[#out + 1] = string.format('%d', c.spent)
  out[#out + 1] = string.format('%d', c.reserved)
  out[#out + 1] = string.format('%.6f', c.resets)
end
return out
