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
-- Returns how many sessions were removed.
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
local removed = 0
local i = 1
while removed < excess and 2 * i <= #ARGV do
  local token = ARGV[2 * i]
  local seen = redis.call('ZSCORE', KEYS[1], token)
  if seen and tonumber(seen) == tonumber(ARGV[2 * i + 1]) then
    redis.call('ZREM', KEYS[1], token)
    redis.call('HDEL', KEYS[2], token)
    redis.call('DEL', KEYS[2 + 2 * i - 1], KEYS[2 + 2 * i])
    removed = removed + 1
  end
  i = i + 1
end
return removed
