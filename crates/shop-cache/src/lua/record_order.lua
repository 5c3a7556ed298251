-- Records one order for the shopper insights, for some of its items: the shopper
-- bought each of them, and each was bought together with every other item of the
-- order. The caller passes the items whose keys share a slot (all of them in the
-- book layout, one per call in the cluster layout, where an item's keys carry its
-- own hash tag), so each call stays in one slot.
-- Each also-bought list keeps at most ARGV[2] items by the Space-Saving algorithm
-- (Metwally et al.): a new item on a full list replaces the least counted one and
-- inherits its count plus one. Memory stays bounded, an item bought together often
-- enough is never lost, and a count overestimates by at most the replaced minimum.
-- (Plain trimming would evict every newcomer from a list full of ties.)
-- KEYS[2i - 1] buyers:<item i>:<window>   KEYS[2i] also:<item i>, for the k items here
-- ARGV[1] the shopper (session token)   ARGV[2] list cap
-- ARGV[3] seconds a new buyers: window key lives   ARGV[4] k
-- ARGV[4 + i] item i (i = 1..k)   ARGV[4 + k + 1 ..] every item of the order
local cap = tonumber(ARGV[2])
local k = tonumber(ARGV[4])
local first = 5 + k
for i = 1, k do
  local item = ARGV[4 + i]
  local buyers, list = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('PFADD', buyers, ARGV[1]) == 1 and redis.call('TTL', buyers) < 0 then
    redis.call('EXPIRE', buyers, ARGV[3])
  end
  for j = first, #ARGV do
    local other = ARGV[j]
    if other ~= item then
      if redis.call('ZSCORE', list, other) or redis.call('ZCARD', list) < cap then
        redis.call('ZINCRBY', list, 1, other)
      else
        local least = redis.call('ZRANGE', list, 0, 0, 'WITHSCORES')
        redis.call('ZREM', list, least[1])
        redis.call('ZADD', list, tonumber(least[2]) + 1, other)
      end
    end
  end
end
return k
