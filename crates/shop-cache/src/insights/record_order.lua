-- Records one order for the shopper insights, for some of its items: the shopper
-- bought each of them, and each was bought together with every other item of the
-- order; and, when the call holds the popularity keys, that the order happened and
-- held each of its items. The caller passes the items whose keys share a slot (all
-- of them and the popularity in one call in the book layout; in the cluster layout
-- first the popularity alone, k = 0, then one call per item, whose keys carry its
-- own hash tag), so each call stays in one slot.
-- The popularity is written first: a call that fails half way (Redis does not undo
-- a script's writes) leaves popularity without pairs, which only lowers scores,
-- never pairs without the popularity they are judged against.
-- Counts are forward-decayed: an order adds ARGV[5], its weight (2 to the power of
-- the half-lives since a fixed landmark), so older orders count for less in every
-- comparison without ever rewriting a list.
-- Each also-bought list keeps at most ARGV[2] items: the order's items new to a
-- full list replace the entries with the least decayed counts and start from this
-- order, so every count is exactly the (decayed) orders since its item came in,
-- never more than the truth, and an old entry that stopped selling goes before a
-- fresh one. The order's newcomers come in together (one did not push out another
-- of the same order). (Plain trimming would evict every newcomer from a list full
-- of ties; Space-Saving, where the newcomer inherits the count it replaced, lets
-- inherited counts push out pairs that earned theirs: see BENCHMARKS.md.)
-- KEYS[2i - 1] buyers:<item i>:<window>   KEYS[2i] also:<item i>, for the k items here
-- KEYS[2k + 1] bought:   KEYS[2k + 2] orders:   (only when ARGV[6] is 1)
-- ARGV[1] the shopper (session token)   ARGV[2] list cap
-- ARGV[3] seconds a new buyers: window key lives   ARGV[4] k   ARGV[5] the weight
-- ARGV[6] 1 if this call counts the order's popularity, else 0
-- ARGV[6 + i] item i (i = 1..k)   ARGV[6 + k + 1 ..] every item of the order
local cap = tonumber(ARGV[2])
local k = tonumber(ARGV[4])
local weight = ARGV[5]
local first = 7 + k
if ARGV[6] == '1' then
  redis.call('INCRBYFLOAT', KEYS[2 * k + 2], weight)
  for j = first, #ARGV do
    redis.call('ZINCRBY', KEYS[2 * k + 1], weight, ARGV[j])
  end
end
for i = 1, k do
  local item = ARGV[6 + i]
  local buyers, list = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('PFADD', buyers, ARGV[1]) == 1 and redis.call('TTL', buyers) < 0 then
    redis.call('EXPIRE', buyers, ARGV[3])
  end
  local newcomers = {}
  for j = first, #ARGV do
    local other = ARGV[j]
    if other ~= item then
      if redis.call('ZSCORE', list, other) then
        redis.call('ZINCRBY', list, weight, other)
      else
        newcomers[#newcomers + 1] = weight
        newcomers[#newcomers + 1] = other
      end
    end
  end
  if #newcomers > 0 then
    local over = redis.call('ZCARD', list) + #newcomers / 2 - cap
    if over > 0 then
      redis.call('ZPOPMIN', list, over)
    end
    redis.call('ZADD', list, unpack(newcomers))
  end
end
return k
