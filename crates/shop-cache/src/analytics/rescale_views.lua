-- The view rescale: keep the most viewed items of viewed: and halve every count, at
-- most once per interval whatever the number of workers (on the server's clock).
-- KEYS[1] viewed:   KEYS[2] the time (unix s) of the last rescale
-- ARGV[1] interval in seconds   ARGV[2] how many items to keep
-- Returns -1 when the last rescale is less than an interval old, else the number of
-- items kept. The time is stored, not a period number, so changing the interval
-- takes effect at once (a period number from a shorter interval looked newer than
-- every period of a longer one, and rescaling stopped), and it is stored after the
-- work, in the same script, so a rescale that fails is not marked done.
local now = tonumber(redis.call('TIME')[1])
local last = tonumber(redis.call('GET', KEYS[2]) or '')
if last and last <= now and now - last < tonumber(ARGV[1]) then
  return -1
end
-- Scores are minus the view count, so the most viewed sit at ranks 0..keep-1 and the
-- rest (ranks keep..-1) go. The book's ZREMRANGEBYRANK 0 -20001 removed the most viewed.
redis.call('ZREMRANGEBYRANK', KEYS[1], tonumber(ARGV[2]), -1)
redis.call('ZINTERSTORE', KEYS[1], 1, KEYS[1], 'WEIGHTS', 0.5)
redis.call('SET', KEYS[2], now)
return redis.call('ZCARD', KEYS[1])
