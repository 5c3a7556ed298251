-- What the session scripts that end a token start with (scripts.rs puts this
-- before them): the one way logout, ending a session from the account page
-- (end_session.lua), the old token at login (login.lua) and a touch that finds
-- its session expired (touch.lua) end it.

-- Now by the server's clock (TIME), so web servers with skewed clocks agree.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Ends `token`: out of its shard's sessions (`shard` holds its keys: recent,
-- login, guests, logins, anonymous, ended), and listed in ended: at `now`, so a
-- touch of it held back before the end and written after it is refused
-- (touch.lua). ended: keeps the last `ended_for` seconds' entries, at most
-- `ended_max` of them (the newest): client input can add to it (a logout needs
-- no session), so it is bounded both ways. The token's history and cart are
-- the caller's (deleted, or moved to a new token at login).
local function end_token(shard, token, now, ended_for, ended_max)
  redis.call('ZREM', shard.recent, token)
  redis.call('ZREM', shard.guests, token)
  redis.call('ZREM', shard.anonymous, token)
  redis.call('ZREM', shard.logins, token)
  redis.call('HDEL', shard.login, token)
  redis.call('ZADD', shard.ended, now, token)
  redis.call('ZREMRANGEBYSCORE', shard.ended, '-inf', '(' .. (now - ended_for))
  redis.call('ZREMRANGEBYRANK', shard.ended, 0, -(ended_max + 1))
end

