-- Removes the sessions a cleaner picked from one shard of the session index, if
-- they are still as old as when picked and the shard is still over its cap.
-- The caller read the oldest tokens with their last-seen times; this script deletes
-- a token only if its time is unchanged, in one call with the check, so a session
-- touched after the pick survives (the book read, then deleted in separate steps,
-- and lost it). A token another cleaner removed meanwhile is skipped, so several
-- cleaners never remove more than the excess.
-- KEYS[1] recent: (the shard)   KEYS[2] login: (the shard)
-- KEYS[2 + 2i - 1] viewed:<token i>   KEYS[2 + 2i] cart:<token i>
-- ARGV[1] the shard's cap   ARGV[2i] token i   ARGV[2i + 1] its last-seen time when picked
-- Returns {how many sessions were removed, microseconds the script ran}: the
-- cleaner sizes its batches by the time it blocks Redis (see session_cleaner.rs).
local t0 = redis.call('TIME')
local function took()
  local t = redis.call('TIME')
  return (tonumber(t[1]) - tonumber(t0[1])) * 1000000 + tonumber(t[2]) - tonumber(t0[2])
end
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
if excess <= 0 then
  return {0, took()}
end
local n = (#ARGV - 1) / 2
if n < 1 then
  return {0, took()}
end
local tokens = {}
for i = 1, n do
  tokens[i] = ARGV[2 * i]
end
-- One read of every picked token's time, then one command of each kind for all
-- the sessions to remove (a command per session was 3x slower).
local seen = redis.call('ZMSCORE', KEYS[1], unpack(tokens))
local gone, owned = {}, {}
for i = 1, n do
  if #gone >= excess then
    break
  end
  if seen[i] and tonumber(seen[i]) == tonumber(ARGV[2 * i + 1]) then
    gone[#gone + 1] = tokens[i]
    owned[#owned + 1] = KEYS[2 + 2 * i - 1]
    owned[#owned + 1] = KEYS[2 + 2 * i]
  end
end
if #gone == 0 then
  return {0, took()}
end
redis.call('ZREM', KEYS[1], unpack(gone))
redis.call('HDEL', KEYS[2], unpack(gone))
redis.call('DEL', unpack(owned))
return {#gone, took()}
