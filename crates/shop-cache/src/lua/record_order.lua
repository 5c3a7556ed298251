-- Records one order for the shopper insights: the shopper bought each item, and each
-- pair of items was bought together.
-- Each also-bought list keeps at most ARGV[2] items by the Space-Saving algorithm
-- (Metwally et al.): a new item on a full list replaces the least counted one and
-- inherits its count plus one. Memory stays bounded, an item bought together often
-- enough is never lost, and a count overestimates by at most the replaced minimum.
-- (Plain trimming would evict every newcomer from a list full of ties.)
-- KEYS[1] the also-bought index set; then per item i (1-based):
--   KEYS[2i] buyers:<item i>:<window>   KEYS[2i+1] also:<item i>
-- ARGV[1] the shopper (session token)   ARGV[2] list cap
-- ARGV[3] seconds a new buyers: window key lives   ARGV[4..] the item ids
local cap = tonumber(ARGV[2])
local n = #ARGV - 3
for i = 1, n do
  local item = ARGV[i + 3]
  local list = KEYS[2 * i + 1]
  if redis.call('PFADD', KEYS[2 * i], ARGV[1]) == 1 and redis.call('TTL', KEYS[2 * i]) < 0 then
    redis.call('EXPIRE', KEYS[2 * i], ARGV[3])
  end
  for j = 1, n do
    if i ~= j then
      local other = ARGV[j + 3]
      if redis.call('ZSCORE', list, other) or redis.call('ZCARD', list) < cap then
        redis.call('ZINCRBY', list, 1, other)
      else
        local least = redis.call('ZRANGE', list, 0, 0, 'WITHSCORES')
        redis.call('ZREM', list, least[1])
        redis.call('ZADD', list, tonumber(least[2]) + 1, other)
      end
    end
  end
  if n > 1 then
    redis.call('SADD', KEYS[1], item)
  end
end
return n
