-- Moves a session to a fresh token for a user who just logged in (fixation defence).
-- KEYS[1] recent:  KEYS[2] login:  KEYS[3] viewed:<old>  KEYS[4] viewed:<new>
-- KEYS[5] cart:<old>  KEYS[6] cart:<new>  KEYS[7] login-once:<form key> (if ARGV[4])
-- ARGV[1] old token  ARGV[2] new token  ARGV[3] user id
-- ARGV[4] '1' when the login form's one-time key is in KEYS[7]  ARGV[5] its lifetime (s)
-- Returns the session token the user now has.
if ARGV[4] == '1' then
  -- The same form submitted again: the session it made, if still this user's.
  local made = redis.call('GET', KEYS[7])
  if made then
    local sep = string.find(made, ' ', 1, true)
    local user, token = string.sub(made, 1, sep - 1), string.sub(made, sep + 1)
    if user == ARGV[3] and redis.call('HGET', KEYS[2], token) == user then
      return token
    end
  end
end
local was = redis.call('HGET', KEYS[2], ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
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
if ARGV[4] == '1' then
  redis.call('SET', KEYS[7], ARGV[3] .. ' ' .. ARGV[2], 'EX', ARGV[5])
end
return ARGV[2]
