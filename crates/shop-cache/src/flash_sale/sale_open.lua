-- Loads a flash sale of an item. A sale of it that has not ended (running or
-- coming) is changed, not replaced: its buyers' counts toward the per-user limit,
-- its remembered answers, its pending reservations and their numbering stay, and
-- the new stock is what is left to reserve once those reservations are ordered.
-- Any other sale of the item (ended, or none) is replaced with all of its state.
-- KEYS[1] sale  KEYS[2] buyers  KEYS[3] answers  KEYS[4] pending  KEYS[5] held
-- ARGV[1] stock  ARGV[2] start  ARGV[3] end  ARGV[4] price in cents
-- ARGV[5] unix time the sale's keys expire  ARGV[6] now (unix seconds)
-- Returns 1 if a sale that had not ended was changed, 0 if a new one was loaded.
local old_end = redis.call('HGET', KEYS[1], 'end')
local stock = ARGV[1]
local seq = 0
local kept = 0
if old_end and tonumber(old_end) > tonumber(ARGV[6]) then
  kept = 1
  seq = redis.call('HGET', KEYS[1], 'seq') or 0
  stock = string.format('%d', math.max(tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[4]), 0))
  redis.call('DEL', KEYS[1])
  for i = 2, 5 do
    redis.call('EXPIREAT', KEYS[i], ARGV[5])
  end
else
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
end
redis.call('HSET', KEYS[1], 'stock', stock, 'start', ARGV[2], 'end', ARGV[3],
  'price_cents', ARGV[4], 'seq', seq, 'expire_at', ARGV[5])
redis.call('EXPIREAT', KEYS[1], ARGV[5])
return kept
