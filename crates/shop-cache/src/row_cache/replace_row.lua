-- A cached row's source changed: write its new copy now and make it due, so a
-- refresh that read the source before the change is followed by one after it.
-- Only for a row that is cached (a delay above 0); any other is left alone.
-- KEYS[1] schedule:  KEYS[2] delay:  KEYS[3] inv:<row>   ARGV[1] row id  ARGV[2] JSON
-- Returns 1 if written, 0 if the row is not cached.
local delay = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0')
if delay <= 0 then
  return 0
end
redis.call('SET', KEYS[3], ARGV[2])
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], tonumber(t[1]) + tonumber(t[2]) / 1000000, ARGV[1])
return 1
