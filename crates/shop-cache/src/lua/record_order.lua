-- Records one order for the shopper insights, for some of its items: the shopper
-- bought each of them, and each was bought together with every other item of the
-- order. The caller passes the items whose keys share a slot (all of them in the
-- book layout, one per call in the cluster layout, where an item's keys carry its
-- own hash tag), so each call stays in one slot.
-- Counts are forward-decayed: an order adds ARGV[5], its weight (2 to the power of
-- the half-lives since a fixed landmark), so older orders count for less in every
-- comparison without ever rewriting a list.
-- Each also-bought list keeps at most ARGV[2] items by the Space-Saving algorithm
-- (Metwally et al.): a new item on a full list replaces the least counted one and
-- inherits its count plus the weight; what it inherited is kept as its error
-- (also-err:<item>), so count - error is what the item is known to have earned.
-- (Plain trimming would evict every newcomer from a list full of ties.)
-- KEYS[3i - 2] buyers:<item i>:<window>   KEYS[3i - 1] also:<item i>
-- KEYS[3i] also-err:<item i>, for the k items here
-- ARGV[1] the shopper (session token)   ARGV[2] list cap
-- ARGV[3] seconds a new buyers: window key lives   ARGV[4] k   ARGV[5] the weight
-- ARGV[5 + i] item i (i = 1..k)   ARGV[5 + k + 1 ..] every item of the order
local cap = tonumber(ARGV[2])
local k = tonumber(ARGV[4])
local weight = tonumber(ARGV[5])
local first = 6 + k
for i = 1, k do
  local item = ARGV[5 + i]
  local buyers, list, errors = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if redis.call('PFADD', buyers, ARGV[1]) == 1 and redis.call('TTL', buyers) < 0 then
    redis.call('EXPIRE', buyers, ARGV[3])
  end
  for j = first, #ARGV do
    local other = ARGV[j]
    if other ~= item then
      if redis.call('ZSCORE', list, other) or redis.call('ZCARD', list) < cap then
        redis.call('ZINCRBY', list, weight, other)
      else
        local least = redis.call('ZRANGE', list, 0, 0, 'WITHSCORES')
        local inherited = tonumber(least[2])
        redis.call('ZREM', list, least[1])
        redis.call('HDEL', errors, least[1])
        redis.call('ZADD', list, inherited + weight, other)
        redis.call('HSET', errors, other, inherited)
      end
    end
  end
end
return k
