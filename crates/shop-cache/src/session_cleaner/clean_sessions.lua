-- One step of the session cleaner on one shard of the session index, in one call.
-- Two ways, by ARGV[17]:
--   on a cluster (ARGV[17] ''), it removes the candidates the previous call picked,
--     if each is still what it was when picked, then picks the next candidates and
--     returns them: the caller passes them back, since their viewed:<token> and
--     cart:<token> keys must be declared in KEYS on a cluster (the script cannot
--     name a key it was not given), so it cannot pick and remove in the same call;
--   on one node (ARGV[17] and ARGV[18] what goes before a token in those keys'
--     names), it picks and removes in the same call, naming each candidate's keys
--     itself (Redis allows a script on one node keys it was not given; a cluster
--     does not): atomic, so no candidate can change between its pick and its
--     removal, and no token travels to the caller and back.
-- The checks below are the same either way (on one node each candidate passes the
-- one that it is unchanged since its pick, which is then not read).
--
-- Candidates come in five kinds, each picked from the front of one index and
-- passed back with that index's bound at the pick (every candidate of the kind
-- scored at or under it then):
--   idle       recent:, idle past ARGV[3] whatever the cap (bound: exclusive)
--   login      logins:, logged in longer ago than ARGV[4] (bound: exclusive)
--   guests     guests:, oldest first: idle past ARGV[2], or for the cap
--   anonymous  anonymous: (not logged in, holding a cart), oldest first, for the cap
--   oldest     recent:, for the cap (by then only logged-in sessions are left)
-- For guests, anonymous and oldest the bound is the newest candidate's time. A candidate is
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
-- Anonymous shoppers next, the same way: one picked for the cap goes only if it is
-- still not logged in, still holds a cart, with the same time, and an 'oldest'
-- goes only once every anonymous shopper there was at the pick has gone too, so a
-- flood of carts without a login (cookieless cart posts) never removes a shopper
-- who logged in.
--
-- KEYS[1] recent: (the shard)   KEYS[2] login: (the shard)   KEYS[3] guests: (the shard)
-- KEYS[4] logins: (the shard)   KEYS[5] anonymous: (the shard)
-- KEYS[5 + 2i - 1] viewed:<token i>   KEYS[5 + 2i] cart:<token i> (cluster only)
-- ARGV[1] the shard's cap   ARGV[2] seconds a guest may stay idle
-- ARGV[3] seconds any session may stay idle   ARGV[4] seconds a login lasts
-- ARGV[5] how many candidates to pick (0: none)
-- ARGV[6] when the candidates were picked (Redis's clock, as the last call returned
--   it; 0 when there are none)
-- ARGV[7 .. 16] for each kind in the order idle, login, guests, anonymous, oldest:
--   how many candidates of it follow, and its bound, as the last call returned them
-- ARGV[17], ARGV[18] on one node: what goes before a token in the names of its
--   viewed: and cart: keys; '' on a cluster
-- ARGV[19 ..] the candidates' tokens, kind by kind in that order (token i)
-- Returns {how many sessions were removed, microseconds the script ran, how many
-- guest, anonymous or login entries were dropped or set right, {token, user, ...} of the
-- removed sessions that were logged in, {{bound, {token, ...}} for each kind in
-- order} the next candidates (none on one node), when they were picked}: the
-- cleaner sizes its batches by the time it blocks Redis (see session_cleaner.rs),
-- goes on at once after a step that only mended entries or picked candidates, and
-- takes the logged-in ones out of their users' indexes of sessions
-- (user-sessions:, other slots on a cluster).
local t0 = redis.call('TIME')
local function took()
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2])
end
local recent, login, guests, logins, anonymous = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local cap = tonumber(ARGV[1])
local now = tonumber(t0[1])
-- The same time a touch in this instant would write (touch.lua).
local now_exact = now + tonumber(t0[2]) / 1000000
local guest_idle_before = now - tonumber(ARGV[2])
local expired_before = now - tonumber(ARGV[3])
local login_before = now - tonumber(ARGV[4])
local batch = tonumber(ARGV[5])
local viewed_prefix, cart_prefix = ARGV[17], ARGV[18]
-- One node: pick, then remove in this call.
local here = viewed_prefix ~= ''
local size = redis.call('ZCARD', recent)
local removed, mended, owners = 0, 0, {}

-- 1. Removes the candidates: `cands` their tokens, `kinds` for each kind {first
-- candidate, count, bound}, `picked_at` when they were picked.
local function remove(cands, kinds, picked_at)
  local n = #cands
  -- The sessions going (ng of them) and their keys.
  local gone, ng, owned = {}, 0, {}
  local stale_guests, stale_logins, stale_anonymous = {}, {}, {}
  -- The candidates of kind k still among the first n members of `index` within
  -- the kind's bound, as candidate numbers and tokens (on one node, all of them:
  -- picked in this call). The pick never repeats a token, so each candidate is
  -- judged once.
  local function still(k, index)
    local kind = kinds[k]
    local args, tokens = {}, {}
    if kind.count == 0 then
      return args, tokens
    end
    local last = kind.first + kind.count - 1
    if here then
      for a = kind.first, last do
        args[a - kind.first + 1] = a
        tokens[a - kind.first + 1] = cands[a]
      end
      return args, tokens
    end
    local in_range = {}
    for _, t in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', kind.bound, 'LIMIT', 0, n)) do
      in_range[t] = true
    end
    local m = 0
    for a = kind.first, last do
      if in_range[cands[a]] then
        m = m + 1
        args[m] = a
        tokens[m] = cands[a]
      end
    end
    return args, tokens
  end
  -- The viewed: and cart: keys of candidate `a`.
  local function keys_of(a)
    if here then
      return viewed_prefix .. cands[a], cart_prefix .. cands[a]
    end
    return KEYS[5 + 2 * a - 1], KEYS[5 + 2 * a]
  end
  -- Candidate `a` goes, with its keys.
  local function take(a)
    local viewed, cart = keys_of(a)
    ng = ng + 1
    gone[ng] = cands[a]
    owned[2 * ng - 1] = viewed
    owned[2 * ng] = cart
  end

  -- Idle past the lifetime: go whatever the cap.
  local args, tokens = still(1, recent)
  for j = 1, #args do
    take(args[j])
  end
  -- Logged in too long ago: go whatever the cap; a login entry whose session is
  -- gone (removed by the book's own code, which knows nothing of logins:) goes.
  args, tokens = still(2, logins)
  if #tokens > 0 then
    local seen = redis.call('ZMSCORE', recent, unpack(tokens))
    for j = 1, #args do
      if seen[j] then
        take(args[j])
      else
        stale_logins[#stale_logins + 1] = tokens[j]
      end
    end
  end
  -- The guests there were at the pick, and the anonymous shoppers, counted before
  -- any is moved below: the 'anonymous' candidates go only once no such guest is
  -- left, the 'oldest' only once neither is.
  local guests_left, anonymous_left = 0, 0
  if kinds[4].count > 0 or kinds[5].count > 0 then
    guests_left = redis.call('ZCOUNT', guests, '-inf', picked_at)
    anonymous_left = redis.call('ZCOUNT', anonymous, '-inf', picked_at)
  end
  -- Guests: judged by their last visit in recent:, which the book's own code
  -- keeps without guests:.
  args, tokens = still(3, guests)
  if #tokens > 0 then
    local bound = tonumber(kinds[3].bound)
    local seen = redis.call('ZMSCORE', recent, unpack(tokens))
    local users = redis.call('HMGET', login, unpack(tokens))
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
      elseif users[j] then
        -- Logged in by a path that did not update guests: (the book's code): no
        -- guest, so not removed as one.
        stale_guests[#stale_guests + 1] = tokens[j]
      elseif any_cart and redis.call('EXISTS', carts[j]) == 1 then
        -- Holding a cart by a path that did not update guests: (the book's code):
        -- an anonymous shopper, listed as one at its last visit.
        stale_guests[#stale_guests + 1] = tokens[j]
        anonymous_left = anonymous_left + redis.call('ZADD', anonymous, 'NX', s, tokens[j])
      elseif size - ng > cap or s < guest_idle_before then
        take(args[j])
      end
    end
  end
  -- The guests removed or dropped leave guests:.
  mended = mended + #stale_guests + #stale_logins
  for j = 1, ng do
    stale_guests[#stale_guests + 1] = gone[j]
  end
  if #stale_guests > 0 then
    -- Each was scored at or before the pick (a guest's entry is never later than
    -- its recent: one), so counted above.
    guests_left = guests_left - redis.call('ZREM', guests, unpack(stale_guests))
  end
  -- Anonymous shoppers: judged like guests, by their last visit in recent:.
  args, tokens = still(4, anonymous)
  if #tokens > 0 then
    local bound = tonumber(kinds[4].bound)
    local seen = redis.call('ZMSCORE', recent, unpack(tokens))
    local users = redis.call('HMGET', login, unpack(tokens))
    for j = 1, #args do
      local s = seen[j] and tonumber(seen[j])
      local _, cart = keys_of(args[j])
      if not s or users[j] then
        -- Gone (removed by the book's own code), or logged in by a path that did
        -- not update anonymous: (the book's): the entry is dropped.
        stale_anonymous[#stale_anonymous + 1] = tokens[j]
      elseif s > bound then
        -- Seen since by code that keeps recent: only (the book's).
        redis.call('ZADD', anonymous, 'XX', 'GT', s, tokens[j])
        mended = mended + 1
      elseif redis.call('EXISTS', cart) == 0 then
        -- Its cart emptied by a path that did not update anonymous: (the book's
        -- code): a guest again, listed as one at its last visit.
        stale_anonymous[#stale_anonymous + 1] = tokens[j]
        guests_left = guests_left + redis.call('ZADD', guests, 'NX', s, tokens[j])
      elseif size - ng > cap and guests_left <= 0 then
        take(args[j])
      end
    end
  end
  mended = mended + #stale_anonymous
  -- Every session removed so far leaves anonymous: (one idle past its lifetime
  -- too, or the index would keep it for good).
  for j = 1, ng do
    stale_anonymous[#stale_anonymous + 1] = gone[j]
  end
  if #stale_anonymous > 0 then
    anonymous_left = anonymous_left - redis.call('ZREM', anonymous, unpack(stale_anonymous))
  end
  -- The oldest, for the cap: only once no guest and no anonymous shopper there
  -- was at the pick is left.
  args, tokens = still(5, recent)
  if #tokens > 0 and guests_left <= 0 and anonymous_left <= 0 then
    local before = ng
    for j = 1, #args do
      if size - ng <= cap then
        break
      end
      take(args[j])
    end
    -- None is a guest unless the book's code scored it ahead of Redis's clock
    -- (its guest entry was set right to that time, so not counted above); looked
    -- up only when guests: holds anyone.
    if ng > before and redis.call('EXISTS', guests) == 1 then
      redis.call('ZREM', guests, unpack(gone, before + 1, ng))
    end
    if ng > before and redis.call('EXISTS', anonymous) == 1 then
      redis.call('ZREM', anonymous, unpack(gone, before + 1, ng))
    end
  end

  if ng > 0 then
    -- The logged-in sessions with a login time (every login of the shop's; the
    -- book's own have none, and no users' index either) leave logins: here and
    -- their users' indexes at the caller: their users are returned.
    if redis.call('EXISTS', logins) == 1 then
      local since = redis.call('ZMSCORE', logins, unpack(gone, 1, ng))
      local timed = {}
      for j = 1, ng do
        if since[j] then
          timed[#timed + 1] = gone[j]
        end
      end
      if #timed > 0 then
        local users = redis.call('HMGET', login, unpack(timed))
        for j = 1, #timed do
          stale_logins[#stale_logins + 1] = timed[j]
          if users[j] then
            owners[#owners + 1] = timed[j]
            owners[#owners + 1] = users[j]
          end
        end
      end
    end
    redis.call('ZREM', recent, unpack(gone, 1, ng))
    redis.call('HDEL', login, unpack(gone, 1, ng))
    redis.call('DEL', unpack(owned, 1, 2 * ng))
    removed = ng
    size = size - ng
  end
  if #stale_logins > 0 then
    redis.call('ZREM', logins, unpack(stale_logins))
  end
end

-- 2. Picks the next candidates, up to the batch: sessions past a lifetime whatever the
-- cap; then guests idle too long, and the oldest guests for the excess; the
-- oldest anonymous shoppers for the rest of the excess only when every guest is
-- picked; the oldest sessions for what is still left only when every anonymous
-- shopper is picked too.
-- Tokens only; each kind's bound is read once (the newest candidate's score).
local now_text = string.format('%.17g', now_exact)
local function pick()
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
  for k = 1, 5 do
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
    local no_anonymous_left = true
    if no_guest_left and excess > 0 and count < batch then
      local waiting = redis.call('ZCARD', anonymous)
      if waiting > 0 then
        local take = math.min(excess, waiting, batch - count)
        no_anonymous_left = take == waiting
        -- Read past the sessions already picked (expired ones among the oldest).
        local list = add(redis.call('ZRANGE', anonymous, 0, take + count - 1), take, false)
        excess = excess - #list
        next_[4] = {bound_of(anonymous, list), list}
      end
    end
    if no_guest_left and no_anonymous_left and excess > 0 and count < batch then
      local want = math.min(excess, batch - count)
      -- Read past the sessions already picked (expired ones among the oldest).
      local oldest = add(redis.call('ZRANGE', recent, 0, want + count - 1), want, true)
      next_[5] = {bound_of(recent, oldest), oldest}
    end
  end
  return next_
end

-- Each kind's candidates, in one list: {first candidate, count, bound}.
local cands, kinds = {}, {}
local next_
if here then
  next_ = pick()
  for k = 1, 5 do
    local bound, tokens = next_[k][1], next_[k][2]
    kinds[k] = {first = #cands + 1, count = #tokens, bound = bound}
    for _, t in ipairs(tokens) do
      cands[#cands + 1] = t
    end
    next_[k] = {'', {}}
  end
  if #cands > 0 then
    remove(cands, kinds, now_text)
  end
else
  for k = 1, 5 do
    local count = tonumber(ARGV[5 + 2 * k])
    kinds[k] = {first = #cands + 1, count = count, bound = ARGV[6 + 2 * k]}
    for i = #cands + 1, #cands + count do
      cands[i] = ARGV[18 + i]
    end
  end
  if #cands > 0 then
    remove(cands, kinds, ARGV[6])
  end
  next_ = pick()
end
return {removed, took(), mended, owners, next_, now_text}
