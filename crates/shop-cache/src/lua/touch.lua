-- One page view or request of a session (the book's update_token), atomically.
-- KEYS[1] recent: (the session's shard)   KEYS[2] login: (same)   KEYS[3] viewed:<token>
-- KEYS[4] guests: (same shard)   KEYS[5] cart:<token>   KEYS[6] logins: (same shard)
-- The item's global count (viewed:) and its distinct viewers are not written here:
-- the caller counts views in batches (see session/views.rs, ViewFlusher).
-- ARGV[1] token   ARGV[2] user id or ''   ARGV[3] item id or ''   ARGV[4] history length
-- ARGV[5] seconds a session with a login or a cart may stay idle
-- ARGV[6] seconds a guest may stay idle   ARGV[7] seconds a login lasts at most
-- Returns {1 when this touch started the session, 0 when it was known, 2 when it
-- had expired (removed here, nothing else done); user id or false}: the caller
-- learns who is asking in the same round trip (for an expired session, who it was
-- logged in as, so the caller takes it out of that user's index of sessions).
-- A token the shop does not know starts a session: the shop hands out tokens without
-- writing anything (a client that never sends its cookie back costs no key), so the
-- first request that comes back with one is where its session begins.
-- Lifetimes: a session idle longer than its kind may be (a guest, or one with a
-- login or a cart), or logged in longer ago than a login lasts (logins:, written
-- by login.lua), is expired: removed with everything it owns, as on logout, and the
-- caller hands out a new token. The cleaner removes such sessions too
-- (clean_sessions.lua); this check makes the lifetime exact between its rounds.
-- A login the book's code wrote (login: without logins:) gets its logins: entry now.
-- A session that is not logged in and has no cart is a guest: it is also kept in
-- guests: (same time), which the cleaner empties first and whose idle members
-- expire. Logging in and a cart line take a session out of guests: (login.lua,
-- cart_set.lua); a guest touch puts it back when neither holds any more.
-- The time is the server's (TIME), so web servers with skewed clocks agree.
-- A view's score in viewed:<token> is a sequence number, one more than the session's
-- latest: strictly ordered like the book's timestamps (and after one the book's code
-- wrote), but a small integer, which Redis stores in 1-2 bytes instead of a float's
-- 17 characters (the history's memory fell from 730 to 282 bytes a session).
-- Every redis.call costs about a microsecond of Redis time, so each is spent only
-- when needed: the history is trimmed only when it grew, and the user is read only
-- when the caller lacks it.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local user = false
local cart = 0
local started = 1
if ARGV[2] ~= '' then
  -- The book's update_token with a user: a login now, whatever came before.
  user = ARGV[2]
  started = redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], user)
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('ZADD', KEYS[6], 'NX', now, ARGV[1])
else
  local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
  user = redis.call('HGET', KEYS[2], ARGV[1])
  if not user then
    cart = redis.call('EXISTS', KEYS[5])
  end
  if seen then
    started = 0
    local idle = now - tonumber(seen)
    local expired
    if user then
      local since = redis.call('ZSCORE', KEYS[6], ARGV[1])
      if not since then
        redis.call('ZADD', KEYS[6], now, ARGV[1])
      end
      expired = idle > tonumber(ARGV[5])
        or (since and now - tonumber(since) > tonumber(ARGV[7]))
    elseif cart == 1 then
      expired = idle > tonumber(ARGV[5])
    else
      expired = idle > tonumber(ARGV[6])
    end
    if expired then
      redis.call('ZREM', KEYS[1], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
      redis.call('ZREM', KEYS[6], ARGV[1])
      redis.call('HDEL', KEYS[2], ARGV[1])
      redis.call('DEL', KEYS[3], KEYS[5])
      return {2, user}
    end
  end
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  if not user and cart == 0 then
    redis.call('ZADD', KEYS[4], now, ARGV[1])
  end
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
return {started, user}
