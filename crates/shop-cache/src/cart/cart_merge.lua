-- Merges a session's cart into its user's cart at a login, once: the lines are
-- added to the account's (quantities added per item, at most the most of one item;
-- a new line only while the cart has room, the rest left out), unless this
-- session's cart was merged already (a retried login or merge adds nothing twice),
-- and not while a checkout holds the account's cart (its order would leave the
-- added units behind as if not ordered): the caller merges at a later cart read.
-- KEYS[1] user-cart:<user>   KEYS[2] user-cart-merges:<user>
-- KEYS[3] user-checkout:<user>   (all in the user's slot)
-- ARGV[1] the merge's id (the session's token and a digest of its lines)   ARGV[2] most of one item   ARGV[3] most
-- lines   ARGV[4] seconds the account's cart lives untouched   ARGV[5] seconds a
-- merge is remembered   ARGV[6] most merges remembered   ARGV[7], ARGV[8], ...
-- item id, quantity, in pairs
-- Returns {0, lines left out for want of room, units cut by the most of one
-- item} when merged now, {-1, 0, 0} when merged before, {-2, 0, 0} when a
-- checkout holds the cart (nothing done).
-- The merges remembered are a sorted set by time, trimmed to the window and the
-- count on each merge, so a user's logins cannot grow it without bound.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-2, 0, 0}
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {-1, 0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[5]))
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[6]) + 1))
redis.call('EXPIRE', KEYS[2], ARGV[5])
local most, lines = tonumber(ARGV[2]), tonumber(ARGV[3])
local left_out, cut = 0, 0
for i = 7, #ARGV, 2 do
  local had = redis.call('HGET', KEYS[1], ARGV[i])
  if had or redis.call('HLEN', KEYS[1]) < lines then
    -- At most the most of one item, and never below what the account's line
    -- held (above a most lowered since): what does not fit is the guest's, cut.
    local held, adding = tonumber(had) or 0, tonumber(ARGV[i + 1])
    local kept = math.max(held, math.min(most, held + adding))
    redis.call('HSET', KEYS[1], ARGV[i], kept)
    cut = cut + held + adding - kept
  else
    left_out = left_out + 1
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
return {0, left_out, cut}
