-- One page view or request of a session (the book's update_token), atomically.
-- KEYS[1] recent: (the session's shard)   KEYS[2] login: (same)   KEYS[3] viewed:<token>
-- With 5 keys (the book layout), the view is also counted here:
-- KEYS[4] viewed:   KEYS[5] viewers:<item>:<window> (the item's distinct viewers)
-- With 3 keys (the cluster layout) the caller counts views in batches instead:
-- viewed: is one key on one node, and a command per view would make it the busiest.
-- ARGV[1] token   ARGV[2] user id or ''   ARGV[3] item id or ''   ARGV[4] history length
-- ARGV[5] '1' when the token must already be a session (it came from a client's
--         cookie: an unknown one is refused, not adopted, so nobody can choose a token)
-- ARGV[6] seconds a new viewers: window key lives
-- Returns {1, user id or false} or, for a refused unknown token, {0, false}: the
-- caller learns who is asking in the same round trip.
-- The time is the server's (TIME), so web servers with skewed clocks agree, and a
-- view is always stamped after the session's previous one, even within a microsecond.
if ARGV[5] == '1' and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {0, false}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZADD', KEYS[1], now, ARGV[1])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
if ARGV[3] ~= '' then
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local at = now
  if last[2] ~= nil and tonumber(last[2]) >= at then
    at = tonumber(last[2]) + 0.000001
  end
  redis.call('ZADD', KEYS[3], at, ARGV[3])
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(tonumber(ARGV[4]) + 1))
  if #KEYS == 5 then
    redis.call('ZINCRBY', KEYS[4], -1, ARGV[3])
    if redis.call('PFADD', KEYS[5], ARGV[1]) == 1 and redis.call('TTL', KEYS[5]) < 0 then
      redis.call('EXPIRE', KEYS[5], ARGV[6])
    end
  end
end
return {1, redis.call('HGET', KEYS[2], ARGV[1])}
