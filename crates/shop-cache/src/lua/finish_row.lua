-- Ends a refresh claimed by claim_row.lua, with the delay as it is now (it may have
-- changed while the database was read).
-- KEYS[1] schedule:  KEYS[2] delay:  KEYS[3] inv:<row>
-- ARGV[1] row id  ARGV[2] mode: 'store' | 'missing' | 'retry' | 'unscheduled' (the
-- claim found no delay: remove the row unless it was scheduled again meanwhile)
-- ARGV[3] the row's JSON (store) or the retry back-off in seconds (retry)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local delay = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0')
if delay <= 0 or ARGV[2] == 'missing' then
  -- Unscheduled meanwhile, or the row no longer exists: it leaves the cache.
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DEL', KEYS[3])
  return 0
end
if ARGV[2] == 'unscheduled' then
  -- Scheduled again since the claim: it stays, due as the new schedule says.
  return 3
end
if ARGV[2] == 'retry' then
  -- The database failed: keep the old value, try again after the back-off.
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return 2
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[1], now + delay, ARGV[1])
return 1
