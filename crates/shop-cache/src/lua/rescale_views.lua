-- The view rescale: keep the most viewed items of viewed: and halve every count, at
-- most once per period whatever the number of workers (the period is the server's).
-- KEYS[1] viewed:   KEYS[2] the marker holding the last period rescaled
-- ARGV[1] period length in seconds   ARGV[2] how many items to keep
-- Returns -1 when this period was already done, else the number of items kept.
local now = tonumber(redis.call('TIME')[1])
local period = math.floor(now / tonumber(ARGV[1]))
local last = tonumber(redis.call('GET', KEYS[2]) or '-1')
if last >= period then
  return -1
end
redis.call('SET', KEYS[2], period)
-- Scores are minus the view count, so the most viewed sit at ranks 0..keep-1 and the
-- rest (ranks keep..-1) go. The book's ZREMRANGEBYRANK 0 -20001 removed the most viewed.
redis.call('ZREMRANGEBYRANK', KEYS[1], tonumber(ARGV[2]), -1)
redis.call('ZINTERSTORE', KEYS[1], 1, KEYS[1], 'WEIGHTS', 0.5)
return redis.call('ZCARD', KEYS[1])
