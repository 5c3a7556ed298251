-- One step of the session cleaner on one shard of the session index, in one call:
-- removes the candidates the previous call picked, if each is still what it was
-- when picked, then picks the next candidates and returns them with their times.
-- A step is one round trip: the caller passes the candidates back (their
-- viewed:<token> and cart:<token> keys must be declared in KEYS, which is why the
-- script cannot pick and remove in the same call).
--
-- A candidate is removed only if its time is unchanged since the pick, checked and
-- deleted in this one call, so a session touched after the pick survives (the
-- book read, then deleted in separate steps, and lost it). A candidate another
-- cleaner removed meanwhile is skipped, and one picked for the cap goes only while
-- the shard is still over it, so several cleaners never remove more than the
-- excess.
-- Guests first: a guest (in guests:, neither logged in nor holding a cart) picked
-- for the cap goes only if it is still a guest with the same time (a cart line or
-- a login since takes it out of guests:); a session picked from recent: for the
-- cap ('oldest') goes only once the shard has no guest left, so the cap never
-- removes a shopper while a guest is left.
--
-- KEYS[1] recent: (the shard)   KEYS[2] login: (the shard)   KEYS[3] guests: (the shard)
-- KEYS[4] logins: (the shard)
-- KEYS[4 + 2i - 1] viewed:<token i>   KEYS[4 + 2i] cart:<token i>
-- ARGV[1] the shard's cap   ARGV[2] seconds a guest may stay idle
-- ARGV[3] seconds any session may stay idle   ARGV[4] seconds a login lasts
-- ARGV[5] how many candidates to pick for the next call (0: none)
-- ARGV[6] when the candidates were picked (Redis's clock, as the last call returned
--   it; 0 when there are none)
-- ARGV[4 + 3i] where candidate i was picked: 'idle' (recent:, idle past ARGV[3]
--   whatever the cap), 'login' (logins:, logged in longer ago than ARGV[4]),
--   'guests' (guests:, oldest first: idle past ARGV[2], or for the cap), 'oldest'
--   (recent:, for the cap)
-- ARGV[5 + 3i] token i   ARGV[6 + 3i] its time when picked (last seen; for
--   'login', when it logged in), as the pick returned it
-- Returns {how many sessions were removed, microseconds the script ran, how many
-- guest or login entries were dropped or set right, {token, user, ...} of the
-- removed sessions that were logged in, {where, token, time, ...} the next
-- candidates, when they were picked}: the cleaner sizes its batches by the time it blocks Redis (see
-- session_cleaner.rs), goes on at once after a step that only mended entries or
-- picked candidates, and takes the logged-in ones out of their users' indexes of
-- sessions (user-sessions:, other slots on a cluster).
local t0 = redis.call('TIME')
local function took()
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2])
end
local cap = tonumber(ARGV[1])
local now = tonumber(t0[1])
local guest_idle_before = now - tonumber(ARGV[2])
local expired_before = now - tonumber(ARGV[3])
local login_before = now - tonumber(ARGV[4])
local batch = tonumber(ARGV[5])
local picked_at = tonumber(ARGV[6])
local n = (#ARGV - 6) / 3
local size = redis.call('ZCARD', KEYS[1])

-- 1. The candidates of the previous call.
local removed, mended, owners = 0, 0, {}
if n >= 1 then
  local modes, tokens, picked = {}, {}, {}
  for i = 1, n do
    modes[i] = ARGV[4 + 3 * i]
    tokens[i] = ARGV[5 + 3 * i]
    picked[i] = tonumber(ARGV[6 + 3 * i])
  end
  -- One read of every candidate's times, then one command of each kind for all
  -- the sessions to remove (a command per session was 3x slower).
  local seen = redis.call('ZMSCORE', KEYS[1], unpack(tokens))
  local as_guest = redis.call('ZMSCORE', KEYS[3], unpack(tokens))
  local since = redis.call('ZMSCORE', KEYS[4], unpack(tokens))
  local logged = redis.call('HMGET', KEYS[2], unpack(tokens))
  local gone, owned, stale, stale_logins, taken = {}, {}, {}, {}, {}
  -- The entries of gone sessions in guests: and logins:, and their owners: only
  -- the ones there are (a command on missing members still costs its lookups).
  local gone_guests, gone_logins, gone_logged = {}, {}, {}
  -- The guests there were at the pick: 'oldest' candidates were picked only when
  -- every one of them was, and go once they have gone. A guest that came since
  -- is newer than any candidate, and is picked (first) by this call's pick.
  local guests_left = redis.call('ZCOUNT', KEYS[3], '-inf', ARGV[6])
  local function over_cap()
    return size - #gone > cap
  end
  local function take(i)
    taken[tokens[i]] = true
    gone[#gone + 1] = tokens[i]
    owned[#owned + 1] = KEYS[4 + 2 * i - 1]
    owned[#owned + 1] = KEYS[4 + 2 * i]
    if as_guest[i] then
      gone_guests[#gone_guests + 1] = tokens[i]
      if tonumber(as_guest[i]) <= picked_at then
        guests_left = guests_left - 1
      end
    end
    if since[i] then
      gone_logins[#gone_logins + 1] = tokens[i]
    end
    if logged[i] then
      gone_logged[#gone_logged + 1] = tokens[i]
      owners[#owners + 1] = tokens[i]
      owners[#owners + 1] = logged[i]
    end
  end
  for i = 1, n do
    local mode, p = modes[i], picked[i]
    local same = seen[i] and tonumber(seen[i]) == p
    if taken[tokens[i]] then
      -- Picked twice (expired and oldest, say): removed once.
    elseif mode == 'idle' then
      if same and p < expired_before then
        take(i)
      end
    elseif mode == 'login' then
      if not seen[i] then
        -- The session is gone (removed by the book's own code, which knows
        -- nothing of logins:): the entry goes.
        if since[i] then
          stale_logins[#stale_logins + 1] = tokens[i]
        end
      elseif since[i] and tonumber(since[i]) == p and p < login_before then
        take(i)
      end
    elseif mode == 'guests' then
      if not as_guest[i] then
        -- No longer a guest (a cart line or a login since), or removed already.
      elseif not seen[i] then
        -- A guest entry whose session is gone (removed by the book's own code,
        -- which knows nothing of guests:): dropped, so it never holds up the
        -- cleaner.
        stale[#stale + 1] = tokens[i]
        if tonumber(as_guest[i]) <= picked_at then
          guests_left = guests_left - 1
        end
      elseif tonumber(as_guest[i]) ~= tonumber(seen[i]) then
        -- Touched by code that keeps recent: only (the book's): the guest entry
        -- takes the session's time again, so it no longer looks older than it is.
        redis.call('ZADD', KEYS[3], 'XX', seen[i], tokens[i])
        mended = mended + 1
      elseif logged[i] or redis.call('EXISTS', KEYS[4 + 2 * i]) == 1 then
        -- Logged in or holding a cart by a path that did not update guests: (the
        -- book's code): no guest, so not removed as one.
        stale[#stale + 1] = tokens[i]
        if tonumber(as_guest[i]) <= picked_at then
          guests_left = guests_left - 1
        end
      elseif same and (over_cap() or p < guest_idle_before) then
        take(i)
      end
    elseif mode == 'oldest' then
      if same and guests_left <= 0 and over_cap() then
        take(i)
      end
    end
  end
  if #stale > 0 then
    redis.call('ZREM', KEYS[3], unpack(stale))
  end
  if #stale_logins > 0 then
    redis.call('ZREM', KEYS[4], unpack(stale_logins))
  end
  mended = mended + #stale + #stale_logins
  if #gone > 0 then
    redis.call('ZREM', KEYS[1], unpack(gone))
    if #gone_guests > 0 then
      redis.call('ZREM', KEYS[3], unpack(gone_guests))
    end
    if #gone_logins > 0 then
      redis.call('ZREM', KEYS[4], unpack(gone_logins))
    end
    if #gone_logged > 0 then
      redis.call('HDEL', KEYS[2], unpack(gone_logged))
    end
    redis.call('DEL', unpack(owned))
    removed = #gone
    size = size - removed
  end
end

-- 2. The next candidates, up to the batch: sessions past a lifetime whatever the
-- cap; then guests idle too long, and the oldest guests for the excess; the
-- oldest sessions for the rest of the excess only when every guest is picked.
local next_ = {}
local picked = {}
local count = 0
local function add(mode, list, most)
  local added = 0
  for j = 1, #list, 2 do
    if count >= batch or added >= most then
      return added
    end
    if not picked[list[j]] then
      picked[list[j]] = true
      next_[#next_ + 1] = mode
      next_[#next_ + 1] = list[j]
      next_[#next_ + 1] = list[j + 1]
      count = count + 1
      added = added + 1
    end
  end
  return added
end
if batch > 0 then
  add('idle', redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. expired_before,
    'WITHSCORES', 'LIMIT', 0, batch), batch)
  if count < batch then
    add('login', redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. login_before,
      'WITHSCORES', 'LIMIT', 0, batch - count), batch)
  end
  local expired = count
  local excess = size - expired - cap
  local room = batch - count
  local guests = {}
  if room > 0 then
    guests = redis.call('ZRANGE', KEYS[3], 0, batch - 1, 'WITHSCORES')
  end
  local no_guest_left = #guests / 2 < batch
  if #guests > 0 then
    local idle = 0
    while idle < #guests / 2 and tonumber(guests[2 * idle + 2]) < guest_idle_before do
      idle = idle + 1
    end
    local take = math.min(math.max(idle, math.min(excess, #guests / 2)), room)
    no_guest_left = no_guest_left and take == #guests / 2
    local list = {}
    for j = 1, 2 * take do
      list[j] = guests[j]
    end
    -- A guest picked already (past a lifetime) is not counted twice.
    excess = excess - add('guests', list, take)
  end
  if no_guest_left and excess > 0 and count < batch then
    local want = math.min(excess, batch - count)
    -- Read past the sessions already picked (expired ones among the oldest).
    add('oldest', redis.call('ZRANGE', KEYS[1], 0, want + count - 1, 'WITHSCORES'), want)
  end
end
return {removed, took(), mended, owners, next_,
  string.format('%d.%06d', tonumber(t0[1]), tonumber(t0[2]))}
