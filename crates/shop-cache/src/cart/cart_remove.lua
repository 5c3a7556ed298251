-- Removes one cart line. A session whose cart this empties, and which is not logged
-- in, is a guest again: out of anonymous: and back into guests: at its last-seen
-- time, so it expires and is cleaned as a guest (it left guests: when its first
-- line was added). An account's cart is only the line less.
-- A session's cart: KEYS[1] cart:<token>   KEYS[2] recent: (the token's shard)
-- KEYS[3] guests: (same)   KEYS[4] login: (same)   KEYS[5] anonymous: (same)
-- An account's cart: KEYS[1] user-cart:<user> alone.
-- ARGV[1] item id   ARGV[2] token (a session's cart)
redis.call('HDEL', KEYS[1], ARGV[1])
if #KEYS > 1 and redis.call('EXISTS', KEYS[1]) == 0
    and redis.call('HEXISTS', KEYS[4], ARGV[2]) == 0 then
  redis.call('ZREM', KEYS[5], ARGV[2])
  local seen = redis.call('ZSCORE', KEYS[2], ARGV[2])
  if seen then
    redis.call('ZADD', KEYS[3], seen, ARGV[2])
  end
end
return 1
