-- Removes the sessions a cleaner picked from one shard of the session index, if
-- they are still as old as when picked and the shard is still over its cap, or
-- they are past a lifetime (idle too long: a guest, or any session; logged in too
-- long ago).
-- The caller read the oldest tokens with their times; this script deletes a token
-- only if its time is unchanged, in one call with the check, so a session touched
-- after the pick survives (the book read, then deleted in separate steps, and lost
-- it). A token another cleaner removed meanwhile is skipped, so several cleaners
-- never remove more than the excess.
-- Guests first: while the shard has guests (guests:, sessions neither logged in nor
-- holding a cart), the caller picks from them, and a picked guest goes only if it is
-- still a guest with the same time (a cart line or a login since takes it out of
-- guests:), so the cap never removes a shopper while a guest is left.
-- KEYS[1] recent: (the shard)   KEYS[2] login: (the shard)   KEYS[3] guests: (the shard)
-- KEYS[4] logins: (the shard)
-- KEYS[4 + 2i - 1] viewed:<token i>   KEYS[4 + 2i] cart:<token i>
-- ARGV[1] the shard's cap   ARGV[2] seconds a guest may stay idle
-- ARGV[3] where the tokens were picked: 'guests' (guests:, oldest first), 'oldest'
--   (recent:, for the cap), 'idle' (recent:, idle past ARGV[4] whatever the cap),
--   'login' (logins:, logged in longer ago than ARGV[5])
-- ARGV[4] seconds any session may stay idle   ARGV[5] seconds a login lasts
-- ARGV[4 + 2i] token i   ARGV[5 + 2i] its time when picked (last seen; for
--   'login', when it logged in)
-- Returns {how many sessions were removed, microseconds the script ran, how many
-- guest or login entries were dropped or set right, {token, user, token, user, ...}
-- of the removed sessions that were logged in}: the cleaner sizes its batches by
-- the time it blocks Redis (see session_cleaner.rs), goes on at once after a step
-- that only mended entries, and takes the logged-in ones out of their users'
-- indexes of sessions (user-sessions:, other slots on a cluster).
local t0 = redis.call('TIME')
local function took()
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2])
end
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
local mode = ARGV[3]
local from_guests = mode == 'guests'
local idle_before = tonumber(t0[1]) - tonumber(ARGV[2])
local expired_before = tonumber(t0[1]) - tonumber(ARGV[4])
local login_before = tonumber(t0[1]) - tonumber(ARGV[5])
local n = (#ARGV - 5) / 2
if n < 1 or (excess <= 0 and mode == 'oldest') then
  return {0, took(), 0, {}}
end
local tokens = {}
for i = 1, n do
  tokens[i] = ARGV[4 + 2 * i]
end
-- One read of every picked token's time, then one command of each kind for all
-- the sessions to remove (a command per session was 3x slower).
local seen = redis.call('ZMSCORE', KEYS[1], unpack(tokens))
local as_guest = {}
if from_guests then
  as_guest = redis.call('ZMSCORE', KEYS[3], unpack(tokens))
end
local logged = {}
if from_guests then
  logged = redis.call('HMGET', KEYS[2], unpack(tokens))
end
local since = {}
if mode == 'login' then
  since = redis.call('ZMSCORE', KEYS[4], unpack(tokens))
end
local gone, owned, stale, stale_logins = {}, {}, {}, {}
local mended = 0
local function take(i)
  gone[#gone + 1] = tokens[i]
  owned[#owned + 1] = KEYS[4 + 2 * i - 1]
  owned[#owned + 1] = KEYS[4 + 2 * i]
end
for i = 1, n do
  local picked = tonumber(ARGV[5 + 2 * i])
  if mode == 'idle' then
    if seen[i] and tonumber(seen[i]) == picked and picked < expired_before then
      take(i)
    end
  elseif mode == 'login' then
    if not seen[i] then
      -- The session is gone (removed by the book's own code, which knows nothing
      -- of logins:): the entry goes.
      stale_logins[#stale_logins + 1] = tokens[i]
    elseif since[i] and tonumber(since[i]) == picked and picked < login_before then
      take(i)
    end
  elseif from_guests and not seen[i] then
    -- A guest entry whose session is gone (removed by the book's own code, which
    -- knows nothing of guests:): dropped, so it never holds up the cleaner.
    stale[#stale + 1] = tokens[i]
  elseif from_guests and as_guest[i] and tonumber(as_guest[i]) ~= tonumber(seen[i]) then
    -- Touched by code that keeps recent: only (the book's): the guest entry
    -- takes the session's time again, so it no longer looks older than it is.
    redis.call('ZADD', KEYS[3], 'XX', seen[i], tokens[i])
    mended = mended + 1
  elseif from_guests and as_guest[i]
      and (logged[i] or redis.call('EXISTS', KEYS[4 + 2 * i]) == 1) then
    -- Logged in or holding a cart by a path that did not update guests: (the
    -- book's code): no guest, so not removed as one.
    stale[#stale + 1] = tokens[i]
  elseif seen[i] and tonumber(seen[i]) == picked
      and (not from_guests or (as_guest[i] and tonumber(as_guest[i]) == picked)) then
    if #gone < excess or (from_guests and picked < idle_before) then
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
if #gone == 0 then
  return {0, took(), mended, {}}
end
local users = redis.call('HMGET', KEYS[2], unpack(gone))
local owners = {}
for i = 1, #gone do
  if users[i] then
    owners[#owners + 1] = gone[i]
    owners[#owners + 1] = users[i]
  end
end
redis.call('ZREM', KEYS[1], unpack(gone))
redis.call('ZREM', KEYS[3], unpack(gone))
redis.call('ZREM', KEYS[4], unpack(gone))
redis.call('HDEL', KEYS[2], unpack(gone))
redis.call('DEL', unpack(owned))
return {#gone, took(), mended, owners}
