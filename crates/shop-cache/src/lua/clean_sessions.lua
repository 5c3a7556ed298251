-- Removes the sessions a cleaner picked from one shard of the session index, if
-- they are still as old as when picked and the shard is still over its cap (or,
-- for guests, they have been idle longer than a guest may be).
-- The caller read the oldest tokens with their last-seen times; this script deletes
-- a token only if its time is unchanged, in one call with the check, so a session
-- touched after the pick survives (the book read, then deleted in separate steps,
-- and lost it). A token another cleaner removed meanwhile is skipped, so several
-- cleaners never remove more than the excess.
-- Guests first: while the shard has guests (guests:, sessions neither logged in nor
-- holding a cart), the caller picks from them, and a picked guest goes only if it is
-- still a guest with the same time (a cart line or a login since takes it out of
-- guests:), so the cap never removes a shopper while a guest is left.
-- KEYS[1] recent: (the shard)   KEYS[2] login: (the shard)   KEYS[3] guests: (the shard)
-- KEYS[3 + 2i - 1] viewed:<token i>   KEYS[3 + 2i] cart:<token i>
-- ARGV[1] the shard's cap   ARGV[2] seconds a guest may stay idle
-- ARGV[3] '1' when the tokens were picked from guests:, '0' from recent:
-- ARGV[2 + 2i] token i   ARGV[3 + 2i] its last-seen time when picked
-- Returns {how many sessions were removed, microseconds the script ran, how many
-- guest entries were dropped or set right}: the cleaner sizes its batches by the
-- time it blocks Redis (see session_cleaner.rs), and goes on at once after a step
-- that only mended guest entries.
local t0 = redis.call('TIME')
local function took()
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2])
end
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
local from_guests = ARGV[3] == '1'
local idle_before = tonumber(t0[1]) - tonumber(ARGV[2])
local n = (#ARGV - 3) / 2
if n < 1 or (excess <= 0 and not from_guests) then
  return {0, took(), 0}
end
local tokens = {}
for i = 1, n do
  tokens[i] = ARGV[2 + 2 * i]
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
local gone, owned, stale = {}, {}, {}
local mended = 0
for i = 1, n do
  local picked = tonumber(ARGV[3 + 2 * i])
  if from_guests and not seen[i] then
    -- A guest entry whose session is gone (removed by the book's own code, which
    -- knows nothing of guests:): dropped, so it never holds up the cleaner.
    stale[#stale + 1] = tokens[i]
  elseif from_guests and as_guest[i] and tonumber(as_guest[i]) ~= tonumber(seen[i]) then
    -- Touched by code that keeps recent: only (the book's): the guest entry
    -- takes the session's time again, so it no longer looks older than it is.
    redis.call('ZADD', KEYS[3], 'XX', seen[i], tokens[i])
    mended = mended + 1
  elseif from_guests and as_guest[i]
      and (logged[i] or redis.call('EXISTS', KEYS[3 + 2 * i]) == 1) then
    -- Logged in or holding a cart by a path that did not update guests: (the
    -- book's code): no guest, so not removed as one.
    stale[#stale + 1] = tokens[i]
  elseif seen[i] and tonumber(seen[i]) == picked
      and (not from_guests or (as_guest[i] and tonumber(as_guest[i]) == picked)) then
    if #gone < excess or (from_guests and picked < idle_before) then
      gone[#gone + 1] = tokens[i]
      owned[#owned + 1] = KEYS[3 + 2 * i - 1]
      owned[#owned + 1] = KEYS[3 + 2 * i]
    end
  end
end
if #stale > 0 then
  redis.call('ZREM', KEYS[3], unpack(stale))
end
mended = mended + #stale
if #gone == 0 then
  return {0, took(), mended}
end
redis.call('ZREM', KEYS[1], unpack(gone))
redis.call('ZREM', KEYS[3], unpack(gone))
redis.call('HDEL', KEYS[2], unpack(gone))
redis.call('DEL', unpack(owned))
return {#gone, took(), mended}
