-- Sets one cart line, or adds to its quantity, refusing to add a line to a full
-- cart (setting the quantity of a line already there is always allowed; adding
-- past the most a line holds is not).
-- A session's cart: KEYS[1] cart:<token>   KEYS[2] recent: (the token's shard)
-- KEYS[3] guests: (same)   KEYS[4] login: (same)   KEYS[5] anonymous: (same)
-- An account's cart: KEYS[1] user-cart:<user> alone.
-- ARGV[1] item id   ARGV[2] quantity   ARGV[3] most lines   ARGV[4] token (a
-- session's cart)   ARGV[5] seconds an account's cart lives untouched
-- ARGV[6] '' to set the line's quantity to ARGV[2], or the most a line holds to
-- add ARGV[2] to it
-- Returns the line's quantity when stored, 0 when the cart is full, or -1 minus
-- the line's quantity when the sum would pass the most a line holds (nothing
-- written by either).
-- A session with a cart is no guest (it leaves guests:, which the cleaner empties
-- first), and it exists: a visitor whose first request puts something in the cart
-- has no session yet (sessions start lazily), so this starts it (a cart is never
-- left without the recent: entry by which the cleaner finds it). One that is not
-- logged in is an anonymous shopper: listed in anonymous: at its last-seen time,
-- which the cleaner empties after the guests and before any logged-in session.
-- An account's cart belongs to no session: it only expires when left untouched.
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
local quantity = tonumber(ARGV[2])
if ARGV[6] ~= '' and old then
  local had = tonumber(old) or 0
  quantity = quantity + had
  if quantity > tonumber(ARGV[6]) then
    return -1 - had
  end
end
redis.call('HSET', KEYS[1], ARGV[1], quantity)
if #KEYS == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return quantity
end
redis.call('ZREM', KEYS[3], ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if redis.call('ZADD', KEYS[2], 'NX', now, ARGV[4]) == 0 then
  now = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[4]))
end
if redis.call('HEXISTS', KEYS[4], ARGV[4]) == 0 then
  redis.call('ZADD', KEYS[5], now, ARGV[4])
end
return quantity
