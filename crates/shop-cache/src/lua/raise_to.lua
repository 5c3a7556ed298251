-- Sets a counter to a value only if that is higher: a marker of progress that
-- several workers write never goes back.
-- KEYS[1] the counter   ARGV[1] the value
-- Returns the counter's value afterwards.
local now = tonumber(redis.call('GET', KEYS[1]) or '-1')
local new = tonumber(ARGV[1])
if new > now then
  redis.call('SET', KEYS[1], ARGV[1])
  return new
end
return now
