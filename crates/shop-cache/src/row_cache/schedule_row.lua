-- The book's schedule_row_cache: set the row's refresh interval and make it due now.
-- KEYS[1] schedule:  KEYS[2] delay:   ARGV[1] row id  ARGV[2] delay in seconds
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[1], now, ARGV[1])
return 1
