-- Removes the lines order ARGV[1] took from the account's cart, once: each line
-- whose quantity is still the one ordered (a line added or changed since stays,
-- as cart_take.lua). An order already in KEYS[2] takes nothing again, so a take
-- done again (its answer lost, or the database not told) never removes a line
-- the shopper has added since.
-- KEYS[1] user-cart:<user>   KEYS[2] user-cart-takes:<user>
-- ARGV[1] the order: its id and when it was placed ('<id>@<unix seconds>', so an
-- id a restored database gives again is another order)
-- ARGV[2] unix time now   ARGV[3] seconds KEYS[2] is kept
-- ARGV[4] the most orders KEYS[2] keeps (the newest)
-- ARGV[5], ARGV[6], ... item id, quantity ordered, in pairs
-- Returns how many lines it removed, or -1 for an order taken before.
-- Starts with take_lines.lua (take_lines).
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return -1
end
-- Recorded by an earlier release, by its id alone: the same order if that take
-- was at or after this order was placed, a minute allowed for two servers'
-- clocks (an id a restored database gave again belongs to an order placed
-- long after the take of the first).
local id, placed = string.match(ARGV[1], '^(%d+)@(%d+)$')
local bare = id and redis.call('ZSCORE', KEYS[2], id)
if bare and tonumber(bare) >= tonumber(placed) - 60 then
  return -1
end
local removed = take_lines(KEYS[1], 5)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[4]) + 1))
redis.call('EXPIRE', KEYS[2], ARGV[3])
return removed
