-- Requests of one or more sessions of one shard (the book's update_token), each
-- atomically, all in one call: a single request's touch is a batch of one, and the
-- view flusher sends the touches it held back (write-behind) a batch per shard.
-- KEYS[1] recent: (the sessions' shard)   KEYS[2] login: (same)   KEYS[3] guests: (same)
-- KEYS[4] logins: (same)   KEYS[5] anonymous: (same)   KEYS[6] ended: (same)
-- then for session i (from 1): KEYS[5 + 2i] viewed:<token>, KEYS[6 + 2i] cart:<token>
-- ARGV[1] history length   ARGV[2] seconds a session with a login or a cart may stay idle
-- ARGV[3] seconds a guest may stay idle   ARGV[4] seconds a login lasts at most
-- ARGV[5] '1' when the touches were held back (write-behind, see below), else ''
-- ARGV[6] the most entries ended: keeps (the newest)   ARGV[7] seconds it keeps one
-- then for each session in order: token, user id or '', '1' to read what the session
-- holds or '', the number of item views n, and n item ids (oldest first)
-- The item's global count (viewed:) and its distinct viewers are not written here:
-- the caller counts views in batches (see session/views.rs, ViewFlusher).
-- Returns, for each session in order, {1 when this touch started the session, 0 when
-- it was known, 2 when it had expired (removed here, nothing else done); user id or
-- false; the cart (HGETALL) and the history (newest first), read after the touch when
-- asked for, else empty}: the caller learns who is asking in the same round trip (for
-- an expired session, who it was logged in as, so the caller takes it out of that
-- user's index of sessions), and /api/me what the session holds.
-- A token the shop does not know starts a session: the shop hands out tokens without
-- writing anything (a client that never sends its cookie back costs no key), so the
-- first request that comes back with one is where its session begins.
-- Except, for touches held back, a token whose session ended lately (logout,
-- ended from the account page, moved to a new token at login, or expired here),
-- listed in ended:: answered as expired (2), nothing written, so a touch held back
-- before the end and written after it does not bring the session back with the
-- history it had. (A request of now with such a token starts a session as any unknown
-- token does: empty, and without a new cookie that could overwrite the one a
-- login just set.) Looked up only for a token not in recent:.
-- Lifetimes: a session idle longer than its kind may be (a guest, or one with a
-- login or a cart), or logged in longer ago than a login lasts (logins:, written
-- by login.lua), is expired: removed with everything it owns, as on logout, and the
-- caller hands out a new token. The cleaner removes such sessions too
-- (clean_sessions.lua); this check makes the lifetime exact between its rounds.
-- A login the book's code wrote (login: without logins:) gets its logins: entry now.
-- A session that is not logged in and has no cart is a guest: it is also kept in
-- guests: (same time), which the cleaner empties first and whose idle members
-- expire. Logging in and a cart line take a session out of guests: (login.lua,
-- cart_set.lua); a guest touch puts it back when neither holds any more. One
-- that is not logged in and holds a cart is an anonymous shopper, kept in
-- anonymous: (same time), which the cleaner empties after the guests and before
-- any logged-in session.
-- The time is the server's (TIME), so web servers with skewed clocks agree.
-- Starts with end_token.lua (end_token, server_now).
-- A view's score in viewed:<token> is a sequence number, one more than the session's
-- latest: strictly ordered like the book's timestamps (and after one the book's code
-- wrote), but a small integer, which Redis stores in 1-2 bytes instead of a float's
-- 17 characters (the history's memory fell from 730 to 282 bytes a session).
-- Every redis.call costs about a microsecond of Redis time, so each is spent only
-- when needed: the history is trimmed only when it grew, and the user is read only
-- when the caller lacks it.
local now = server_now()
local recent, login, guests, logins, anonymous = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ended = KEYS[6]
local shard = {
  recent = recent, login = login, guests = guests, logins = logins,
  anonymous = anonymous, ended = ended,
}
local held = ARGV[5] == '1'
local ended_max, ended_for = tonumber(ARGV[6]), tonumber(ARGV[7])
local keep = tonumber(ARGV[1])
local idle_max, guest_max, login_max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local function touch(token, given, viewed, cart_key)
  local user = false
  local started = 1
  if given ~= '' then
    -- The book's update_token with a user: a login now, whatever came before.
    user = given
    started = redis.call('ZADD', recent, now, token)
    redis.call('HSET', login, token, user)
    redis.call('ZREM', guests, token)
    redis.call('ZREM', anonymous, token)
    redis.call('ZADD', logins, 'NX', now, token)
    return started, user
  end
  local seen = redis.call('ZSCORE', recent, token)
  if held and not seen then
    if redis.call('ZSCORE', ended, token) then
      return 2, false
    end
  end
  local cart = 0
  user = redis.call('HGET', login, token)
  if not user then
    cart = redis.call('EXISTS', cart_key)
  end
  if seen then
    started = 0
    local idle = now - tonumber(seen)
    local expired
    if user then
      local since = redis.call('ZSCORE', logins, token)
      if not since then
        redis.call('ZADD', logins, now, token)
      end
      expired = idle > idle_max or (since and now - tonumber(since) > login_max)
    elseif cart == 1 then
      expired = idle > idle_max
    else
      expired = idle > guest_max
    end
    if expired then
      -- Ended, as by logout: a touch of it held back is refused (above).
      end_token(shard, token, now, ended_for, ended_max)
      redis.call('DEL', viewed, cart_key)
      return 2, user
    end
  end
  redis.call('ZADD', recent, now, token)
  if not user then
    if cart == 0 then
      redis.call('ZADD', guests, now, token)
    else
      redis.call('ZADD', anonymous, now, token)
    end
  end
  return started, user
end

local out = {}
local a = 8
local i = 0
while a <= #ARGV do
  i = i + 1
  local token, given, read, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local viewed, cart_key = KEYS[5 + 2 * i], KEYS[6 + 2 * i]
  local started, user = touch(token, given, viewed, cart_key)
  if started ~= 2 and n > 0 then
    local last = redis.call('ZRANGE', viewed, -1, -1, 'WITHSCORES')
    local seq = 0
    if last[2] then
      seq = math.floor(tonumber(last[2]))
    end
    local grew = false
    for v = 1, n do
      seq = seq + 1
      if redis.call('ZADD', viewed, seq, ARGV[a + 3 + v]) == 1 then
        grew = true
      end
    end
    if grew then
      redis.call('ZREMRANGEBYRANK', viewed, 0, -(keep + 1))
    end
  end
  local cart, history = {}, {}
  if started ~= 2 and read == '1' then
    cart = redis.call('HGETALL', cart_key)
    history = redis.call('ZRANGE', viewed, 0, -1, 'REV')
  end
  out[#out + 1] = {started, user, cart, history}
  a = a + 4 + n
end
return out
