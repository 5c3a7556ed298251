-- Ends a flash sale now (its item was retired, or an operator stopped it): buys
-- from now on are refused as not on sale; reservations already made settle as
-- usual. A sale not begun yet ends as an empty window (its start is now too).
-- KEYS[1] sale   ARGV[1] now (unix seconds)
-- Returns 1 if a running or coming sale was ended, 0 if there was none.
local e = redis.call('HGET', KEYS[1], 'end')
if not e or tonumber(e) <= tonumber(ARGV[1]) then
  return 0
end
local s = redis.call('HGET', KEYS[1], 'start')
if s and tonumber(s) > tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'start', ARGV[1])
end
redis.call('HSET', KEYS[1], 'end', ARGV[1])
return 1
