-- Records one order for the shopper insights, for some of its items: the shopper
-- bought each of them, and each was bought together with every other item of the
-- order. The caller passes the items whose keys share a slot (all of them in the
-- book layout, one per call in the cluster layout, where an item's keys carry its
-- own hash tag), so each call stays in one slot.
-- Counts are forward-decayed: an order adds ARGV[5], its weight (2 to the power of
-- the half-lives since a fixed landmark), so older orders count for less in every
-- comparison without ever rewriting a list.
-- Each also-bought list keeps at most ARGV[2] items: a new item on a full list
-- replaces the one with the least decayed count and starts from its own order, so
-- every count is exactly the (decayed) orders since its item came in, never more
-- than the truth, and an old entry that stopped selling goes before a fresh one.
-- (Plain trimming would evict every newcomer from a list full of ties; Space-Saving,
-- where the newcomer inherits the count it replaced, lets inherited counts push
-- out pairs that earned theirs: see the evaluation in BENCHMARKS.md.)
-- KEYS[2i - 1] buyers:<item i>:<window>   KEYS[2i] also:<item i>, for the k items here
-- ARGV[1] the shopper (session token)   ARGV[2] list cap
-- ARGV[3] seconds a new buyers: window key lives   ARGV[4] k   ARGV[5] the weight
-- ARGV[5 + i] item i (i = 1..k)   ARGV[5 + k + 1 ..] every item of the order
local cap = tonumber(ARGV[2])
local k = tonumber(ARGV[4])
local weight = ARGV[5]
local first = 6 + k
for i = 1, k do
  local item = ARGV[5 + i]
  local buyers, list = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('PFADD', buyers, ARGV[1]) == 1 and redis.call('TTL', buyers) < 0 then
    redis.call('EXPIRE', buyers, ARGV[3])
  end
  for j = first, #ARGV do
    local other = ARGV[j]
    if other ~= item then
      if redis.call('ZSCORE', list, other) or redis.call('ZCARD', list) < cap then
        redis.call('ZINCRBY', list, weight, other)
      else
        redis.call('ZPOPMIN', list)
        redis.call('ZADD', list, weight, other)
      end
    end
  end
end
return k
