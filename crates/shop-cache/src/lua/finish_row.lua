-- Ends the refreshes claimed by claim_row.lua, each with its delay as it is now
-- (it may have changed while the database was read), in one call for the batch.
-- KEYS[1] schedule:  KEYS[2] delay:  KEYS[2 + i] inv:<row i>
-- ARGV[3i - 2] row i   ARGV[3i - 1] its mode: 'store' | 'missing' | 'retry' |
--   'unscheduled' (the claim found no delay: remove the row unless it was
--   scheduled again meanwhile)
-- ARGV[3i] the row's JSON (store) or the retry back-off in seconds (retry)
-- Returns, per row: 0 removed, 1 stored, 2 to be retried, 3 scheduled again since
-- the claim (left as it is).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local out = {}
for i = 1, #ARGV / 3 do
  local row, mode, value = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local inv = KEYS[2 + i]
  local delay = tonumber(redis.call('ZSCORE', KEYS[2], row) or '0')
  if delay <= 0 or mode == 'missing' then
    -- Unscheduled meanwhile, or the row no longer exists: it leaves the cache.
    redis.call('ZREM', KEYS[1], row)
    redis.call('ZREM', KEYS[2], row)
    redis.call('DEL', inv)
    out[i] = 0
  elseif mode == 'unscheduled' then
    -- Scheduled again since the claim: it stays, due as the new schedule says.
    out[i] = 3
  elseif mode == 'retry' then
    -- The database failed: keep the old value, try again after the back-off.
    redis.call('ZADD', KEYS[1], now + tonumber(value), row)
    out[i] = 2
  else
    redis.call('SET', inv, value)
    redis.call('ZADD', KEYS[1], now + delay, row)
    out[i] = 1
  end
end
return out
