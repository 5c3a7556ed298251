-- Removes the lines an order took: each line whose quantity is still the one
-- ordered. A line added since, or whose quantity changed since, stays as the
-- shopper left it. A session whose cart this empties, and which is not logged in,
-- is a guest again (as cart_remove.lua).
-- A session's cart: KEYS[1] cart:<token>   KEYS[2] recent: (the token's shard)
-- KEYS[3] guests: (same)   KEYS[4] login: (same)   KEYS[5] anonymous: (same)
-- An account's cart: KEYS[1] user-cart:<user> alone.
-- ARGV[1] token (a session's cart; else '')   ARGV[2], ARGV[3], ... item id,
-- quantity ordered, in pairs
-- Starts with take_lines.lua (take_lines).
local removed = take_lines(KEYS[1], 2)
if #KEYS > 1 and removed > 0 and redis.call('EXISTS', KEYS[1]) == 0
    and redis.call('HEXISTS', KEYS[4], ARGV[1]) == 0 then
  redis.call('ZREM', KEYS[5], ARGV[1])
  local seen = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if seen then
    redis.call('ZADD', KEYS[3], seen, ARGV[1])
  end
end
return removed
