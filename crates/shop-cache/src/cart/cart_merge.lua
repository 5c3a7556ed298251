-- Merges a session's cart into its user's cart at a login, once: the lines are
-- added to the account's (quantities added per item, at most the most of one item;
-- a new line only while the cart has room, the rest left out), unless this
-- session's cart was merged already (a retried login or merge adds nothing twice).
-- KEYS[1] user-cart:<user>   KEYS[2] user-cart-merges:<user>   (the user's slot)
-- ARGV[1] the merged session's token   ARGV[2] most of one item   ARGV[3] most
-- lines   ARGV[4] seconds the account's cart lives untouched   ARGV[5] seconds a
-- merge is remembered   ARGV[6], ARGV[7], ... item id, quantity, in pairs
-- Returns the lines left out for want of room, or -1 when merged before.
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return -1
end
redis.call('EXPIRE', KEYS[2], ARGV[5])
local most, lines = tonumber(ARGV[2]), tonumber(ARGV[3])
local left_out = 0
for i = 6, #ARGV, 2 do
  local had = redis.call('HGET', KEYS[1], ARGV[i])
  if had then
    redis.call('HSET', KEYS[1], ARGV[i], math.min(most, tonumber(had) + tonumber(ARGV[i + 1])))
  elseif redis.call('HLEN', KEYS[1]) < lines then
    redis.call('HSET', KEYS[1], ARGV[i], math.min(most, tonumber(ARGV[i + 1])))
  else
    left_out = left_out + 1
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
return left_out
