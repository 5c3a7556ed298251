-- Moves a session to a fresh token for a user who just logged in (fixation defence).
-- The new token is in the old one's shard, so every key here shares one slot.
-- KEYS[1] recent:  KEYS[2] login:  KEYS[3] viewed:<old>  KEYS[4] viewed:<new>
-- KEYS[5] cart:<old>  KEYS[6] cart:<new>  KEYS[7] guests:  KEYS[8] logins:
-- KEYS[9] anonymous:  KEYS[10] ended:
-- The new token's login time goes into logins:, which the absolute lifetime counts
-- from (a login always starts it afresh: the new token is a new login).
-- The old token need not be a session yet (sessions start lazily); the new one is
-- logged in, so neither a guest nor an anonymous shopper.
-- ARGV[1] old token  ARGV[2] new token  ARGV[3] user id
-- ARGV[4] seconds ended: keeps an entry (older ones are trimmed)
-- ARGV[5] the most entries ended: keeps (the newest)
-- The old token goes into ended:, so a touch of it held back before the login
-- and written after it (write-behind) does not bring it back (touch.lua).
-- Returns the user the old token was logged in as, or false: the caller takes the
-- old token out of that user's index of sessions (user-sessions:, another slot on
-- a cluster; see session/user_sessions.rs).
-- Starts with end_token.lua (end_token, server_now).
local was = redis.call('HGET', KEYS[2], ARGV[1])
local now = server_now()
local shard = {
  recent = KEYS[1], login = KEYS[2], guests = KEYS[7], logins = KEYS[8],
  anonymous = KEYS[9], ended = KEYS[10],
}
end_token(shard, ARGV[1], now, tonumber(ARGV[4]), tonumber(ARGV[5]))
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[8], now, ARGV[2])
if was and was ~= ARGV[3] then
  -- Someone else's session on this browser: it ends here, as on logout; its cart
  -- and history are theirs and do not pass to the user logging in.
  redis.call('DEL', KEYS[3], KEYS[5])
else
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('RENAME', KEYS[3], KEYS[4])
  end
  if redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('RENAME', KEYS[5], KEYS[6])
  end
end
return was
