-- Removes up to ARGV[2] oldest sessions while recent: holds more than ARGV[1].
-- Picking and deleting happen in this one call, so a session touched after the pick
-- cannot exist: either the touch ran first (and the token is no longer the oldest)
-- or it runs after (and starts a new session). Two cleaners never remove a token twice.
-- KEYS[1] recent:  KEYS[2] login:
-- ARGV[1] cap  ARGV[2] batch  ARGV[3] viewed:<token> prefix  ARGV[4] cart:<token> prefix
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
if excess <= 0 then
  return 0
end
local tokens = redis.call('ZRANGE', KEYS[1], 0, math.min(excess, tonumber(ARGV[2])) - 1)
local owned = {}
for i, token in ipairs(tokens) do
  owned[2 * i - 1] = ARGV[3] .. token
  owned[2 * i] = ARGV[4] .. token
end
redis.call('ZREM', KEYS[1], unpack(tokens))
redis.call('HDEL', KEYS[2], unpack(tokens))
redis.call('DEL', unpack(owned))
return #tokens
