-- Loads a flash sale, replacing any earlier sale of the item with all its buyers,
-- answers and reservations.
-- KEYS[1] sale  KEYS[2] buyers  KEYS[3] answers  KEYS[4] pending  KEYS[5] held
-- ARGV[1] stock  ARGV[2] start  ARGV[3] end  ARGV[4] price in cents
-- ARGV[5] unix time the sale's keys expire
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'start', ARGV[2], 'end', ARGV[3],
  'price_cents', ARGV[4], 'seq', 0, 'expire_at', ARGV[5])
redis.call('EXPIREAT', KEYS[1], ARGV[5])
return 1
