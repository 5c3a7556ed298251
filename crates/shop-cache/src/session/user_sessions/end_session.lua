-- Ends one session of a user, as logout does (its login, last-seen entries, login
-- time, history and cart), if it is still that user's session: the user's index
-- of sessions (user-sessions:) may list a token that has since ended, and a token
-- is never ended on another's behalf.
-- KEYS[1] recent:  KEYS[2] login:  KEYS[3] guests:  KEYS[4] logins: (the token's shard)
-- KEYS[5] viewed:<token>  KEYS[6] cart:<token>  KEYS[7] ended: (the token's shard)
-- ARGV[1] token  ARGV[2] user id  ARGV[3] now (unix time)
-- ARGV[4] the oldest time ended: keeps (entries before it are trimmed)
-- ARGV[5] the most entries ended: keeps (the newest)
-- Returns 1 when it ended the session, 0 when the token was not that user's.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[5], KEYS[6])
-- A touch of it held back before now is refused when it is written (touch.lua).
redis.call('ZADD', KEYS[7], ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', '(' .. ARGV[4])
redis.call('ZREMRANGEBYRANK', KEYS[7], 0, -(tonumber(ARGV[5]) + 1))
return 1
