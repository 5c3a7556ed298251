-- One step of the session cleaner on one shard of the session index, in one call:
-- removes the candidates the previous call picked, if each is still what it was
-- when picked, then picks the next candidates and returns them.
-- A step is one round trip: the caller passes the candidates back (their
-- viewed:<token> and cart:<token> keys must be declared in KEYS, which is why the
-- script cannot pick and remove in the same call).
--
-- Candidates come in four kinds, each picked from the front of one index and
-- passed back with that index's bound at the pick (every candidate of the kind
-- scored at or under it then):
--   idle    recent:, idle past ARGV[3] whatever the cap (bound: exclusive)
--   login   logins:, logged in longer ago than ARGV[4] (bound: exclusive)
--   guests  guests:, oldest first: idle past ARGV[2], or for the cap
--   oldest  recent:, for the cap
-- For guests and oldest the bound is the newest candidate's time. A candidate is
-- unchanged since the pick when it is still among the first (all candidates)
-- members of its index scored within the bound: read by one ZRANGEBYSCORE per
-- kind, tokens only. Every touch after the pick writes a later time than any
-- session had at the pick (the touch's time is Redis's, as here), so a session
-- touched after the pick is out of range and survives (the book read, then
-- deleted in separate steps, and lost it). Two exceptions, both from the book's
-- own code, which writes its host's clock: its touch is caught unless that clock
-- is behind Redis's by more than the newest candidate's age, and where that code
-- wrote a time ahead of Redis's clock, a touch after the pick may score within the
-- bound. No score is formatted or parsed per candidate (reading, returning and
-- comparing each one's time was half of the script's cost).
-- A candidate another cleaner removed meanwhile is skipped, and one picked for the
-- cap goes only while the shard is still over it, so several cleaners never remove
-- more than the excess.
-- Guests first: a guest (in guests:, neither logged in nor holding a cart) picked
-- for the cap goes only if it is still a guest with the same time (a cart line or
-- a login since takes it out of guests:); a session picked from recent: for the
-- cap ('oldest') goes only once every guest there was at the pick has gone or been
-- seen since (a guest seen since is newer than the candidates, and picked first
-- by this call's pick), so the cap never removes a shopper for an older guest.
--
-- KEYS[1] recent: (the shard)   KEYS[2] login: (the shard)   KEYS[3] guests: (the shard)
-- KEYS[4] logins: (the shard)
-- KEYS[4 + 2i - 1] viewed:<token i>   KEYS[4 + 2i] cart:<token i>
-- ARGV[1] the shard's cap   ARGV[2] seconds a guest may stay idle
-- ARGV[3] seconds any session may stay idle   ARGV[4] seconds a login lasts
-- ARGV[5] how many candidates to pick for the next call (0: none)
-- ARGV[6] when the candidates were picked (Redis's clock, as the last call returned
--   it; 0 when there are none)
-- ARGV[7 .. 14] for each kind in the order idle, login, guests, oldest: how many
--   candidates of it follow, and its bound, as the last call returned them
-- ARGV[15 ..] the candidates' tokens, kind by kind in that order (token i)
-- Returns {how many sessions were removed, microseconds the script ran, how many
-- guest or login entries were dropped or set right, {token, user, ...} of the
-- removed sessions that were logged in, {{bound, {token, ...}} for each kind in
-- order} the next candidates, when they were picked}: the cleaner sizes its
-- batches by the time it blocks Redis (see session_cleaner.rs), goes on at once
-- after a step that only mended entries or picked candidates, and takes the
-- logged-in ones out of their users' indexes of sessions (user-sessions:, other
-- slots on a cluster).
local t0 = redis.call('TIME')
local function took()
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2])
end
local recent, login, guests, logins = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cap = tonumber(ARGV[1])
local now = tonumber(t0[1])
-- The same time a touch in this instant would write (touch.lua).
local now_exact = now + tonumber(t0[2]) / 1000000
local guest_idle_before = now - tonumber(ARGV[2])
local expired_before = now - tonumber(ARGV[3])
local login_before = now - tonumber(ARGV[4])
local batch = tonumber(ARGV[5])
local picked_at = ARGV[6]
local size = redis.call('ZCARD', recent)

-- 1. The candidates of the previous call, kind by kind: {first argument, count,
-- bound}.
local kinds = {}
local n = 0
for k = 1, 4 do
  local count = tonumber(ARGV[5 + 2 * k])
  kinds[k] = {first = 15 + n, count = count, bound = ARGV[6 + 2 * k]}
  n = n + count
end
local removed, mended, owners = 0, 0, {}
if n >= 1 then
  local gone, owned, gone_logged = {}, {}, {}
  local stale_guests, stale_logins = {}, {}
  local function over_cap()
    return size - #gone > cap
  end
  -- The candidates of kind k still among the first n members of `index` within
  -- the kind's bound, as argument numbers, their tokens and their login: entries.
  -- The pick never repeats a token, so each candidate is judged once.
  local function still(k, index)
    local kind = kinds[k]
    local args, tokens, users = {}, {}, {}
    if kind.count == 0 then
      return args, tokens, users
    end
    local in_range = {}
    for _, t in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', kind.bound, 'LIMIT', 0, n)) do
      in_range[t] = true
    end
    for a = kind.first, kind.first + kind.count - 1 do
      if in_range[ARGV[a]] then
        args[#args + 1] = a
        tokens[#tokens + 1] = ARGV[a]
      end
    end
    if #tokens > 0 then
      users = redis.call('HMGET', login, unpack(tokens))
    end
    return args, tokens, users
  end
  -- The viewed: and cart: keys of the candidate whose token is argument `a`.
  local function keys_of(a)
    local i = a - 14
    return KEYS[4 + 2 * i - 1], KEYS[4 + 2 * i]
  end
  -- The candidate whose token is argument `a` goes, with its keys; `user` its
  -- login: entry.
  local function take(a, user)
    local viewed, cart = keys_of(a)
    gone[#gone + 1] = ARGV[a]
    owned[#owned + 1] = viewed
    owned[#owned + 1] = cart
    if user then
      gone_logged[#gone_logged + 1] = ARGV[a]
      owners[#owners + 1] = ARGV[a]
      owners[#owners + 1] = user
    end
  end

  -- Idle past the lifetime: go whatever the cap.
  local args, tokens, users = still(1, recent)
  for j = 1, #args do
    take(args[j], users[j])
  end
  -- Logged in too long ago: go whatever the cap; a login entry whose session is
  -- gone (removed by the book's own code, which knows nothing of logins:) goes.
  args, tokens, users = still(2, logins)
  if #tokens > 0 then
    local seen = redis.call('ZMSCORE', recent, unpack(tokens))
    for j = 1, #args do
      if seen[j] then
        take(args[j], users[j])
      else
        stale_logins[#stale_logins + 1] = tokens[j]
      end
    end
  end
  -- The guests there were at the pick, counted before any is moved below: the
  -- 'oldest' candidates go only once all of them have gone.
  local guests_left = 0
  if kinds[4].count > 0 then
    guests_left = redis.call('ZCOUNT', guests, '-inf', picked_at)
  end
  -- Guests: judged by their last visit in recent:, which the book's own code
  -- keeps without guests:.
  args, tokens, users = still(3, guests)
  if #tokens > 0 then
    local bound = tonumber(kinds[3].bound)
    local seen = redis.call('ZMSCORE', recent, unpack(tokens))
    -- Carts written by a path that did not update guests: (the book's code): one
    -- call for all, one a candidate only when there is any.
    local carts = {}
    for j = 1, #args do
      local _, cart = keys_of(args[j])
      carts[j] = cart
    end
    local any_cart = redis.call('EXISTS', unpack(carts)) > 0
    for j = 1, #args do
      local s = seen[j] and tonumber(seen[j])
      if not s then
        -- A guest entry whose session is gone (removed by the book's own code):
        -- dropped, so it never holds up the cleaner.
        stale_guests[#stale_guests + 1] = tokens[j]
      elseif s > bound then
        -- Seen since by code that keeps recent: only (the book's): the guest
        -- entry takes the session's time, so it no longer looks older than it is.
        redis.call('ZADD', guests, 'XX', 'GT', s, tokens[j])
        mended = mended + 1
      elseif users[j] or (any_cart and redis.call('EXISTS', carts[j]) == 1) then
        -- Logged in or holding a cart by a path that did not update guests: (the
        -- book's code): no guest, so not removed as one.
        stale_guests[#stale_guests + 1] = tokens[j]
      elseif over_cap() or s < guest_idle_before then
        take(args[j], users[j])
      end
    end
  end
  -- The guests removed or dropped leave guests:.
  mended = mended + #stale_guests + #stale_logins
  for _, t in ipairs(gone) do
    stale_guests[#stale_guests + 1] = t
  end
  if #stale_guests > 0 then
    -- Each was scored at or before the pick (a guest's entry is never later than
    -- its recent: one), so counted above.
    guests_left = guests_left - redis.call('ZREM', guests, unpack(stale_guests))
  end
  -- The oldest, for the cap: only once no guest there was at the pick is left.
  args, tokens, users = still(4, recent)
  if #tokens > 0 and guests_left <= 0 then
    local before = #gone
    for j = 1, #args do
      if over_cap() then
        take(args[j], users[j])
      end
    end
    -- None is a guest unless the book's code scored it ahead of Redis's clock
    -- (its guest entry was set right to that time, so not counted above); looked
    -- up only when guests: holds anyone.
    if #gone > before and redis.call('EXISTS', guests) == 1 then
      redis.call('ZREM', guests, unpack(gone, before + 1))
    end
  end

  for _, t in ipairs(gone_logged) do
    stale_logins[#stale_logins + 1] = t
  end
  if #stale_logins > 0 then
    redis.call('ZREM', logins, unpack(stale_logins))
  end
  if #gone > 0 then
    redis.call('ZREM', recent, unpack(gone))
    if #gone_logged > 0 then
      redis.call('HDEL', login, unpack(gone_logged))
    end
    redis.call('DEL', unpack(owned))
    removed = #gone
    size = size - removed
  end
end

-- 2. The next candidates, up to the batch: sessions past a lifetime whatever the
-- cap; then guests idle too long, and the oldest guests for the excess; the
-- oldest sessions for the rest of the excess only when every guest is picked.
-- Tokens only; each kind's bound is read once (the newest candidate's score).
local now_text = string.format('%.17g', now_exact)
local next_ = {}
local picked = {}
local count = 0
-- Adds the tokens of `list` not picked already, at most `most`; `last` is
-- whether a later kind may follow (which must know what was picked).
local function add(list, most, last)
  local tokens, j = {}, 1
  local dedupe = count > 0
  while j <= #list and count < batch and #tokens < most do
    local t = list[j]
    if not (dedupe and picked[t]) then
      if not last then
        picked[t] = true
      end
      tokens[#tokens + 1] = t
      count = count + 1
    end
    j = j + 1
  end
  return tokens
end
-- The bound of a kind picked from the front of `index`: the newest candidate's
-- time (a session scored ahead of Redis's clock, by the book's code on a host
-- whose clock is ahead, is within its own bound too, so it is removed rather than
-- picked again and again).
local function bound_of(index, tokens)
  if #tokens == 0 then
    return ''
  end
  local newest = tonumber(redis.call('ZSCORE', index, tokens[#tokens]))
  return string.format('%.17g', newest)
end
for k = 1, 4 do
  next_[k] = {'', {}}
end
if batch > 0 then
  local idle = add(redis.call('ZRANGEBYSCORE', recent, '-inf', '(' .. expired_before,
    'LIMIT', 0, batch), batch, false)
  next_[1] = {'(' .. expired_before, idle}
  if count < batch then
    local expired = add(redis.call('ZRANGEBYSCORE', logins, '-inf', '(' .. login_before,
      'LIMIT', 0, batch - count), batch, false)
    next_[2] = {'(' .. login_before, expired}
  end
  local excess = size - count - cap
  local room = batch - count
  local no_guest_left = true
  if room > 0 then
    local waiting = redis.call('ZCARD', guests)
    if waiting > 0 then
      local idle_guests = redis.call('ZCOUNT', guests, '-inf', '(' .. guest_idle_before)
      local take = math.min(math.max(idle_guests, math.min(excess, waiting)), room)
      no_guest_left = take == waiting
      local list = {}
      if take > 0 then
        list = add(redis.call('ZRANGE', guests, 0, take - 1), take, false)
      end
      -- A guest picked already (past a lifetime) is not counted twice.
      excess = excess - #list
      next_[3] = {bound_of(guests, list), list}
    end
  end
  if no_guest_left and excess > 0 and count < batch then
    local want = math.min(excess, batch - count)
    -- Read past the sessions already picked (expired ones among the oldest).
    local oldest = add(redis.call('ZRANGE', recent, 0, want + count - 1), want, true)
    next_[4] = {bound_of(recent, oldest), oldest}
  end
end
return {removed, took(), mended, owners, next_, now_text}
