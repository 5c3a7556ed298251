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
local n = #ARGV / 3
-- One command of each kind for the whole batch (batched.lua).
local rows = {}
for i = 1, n do
  rows[i] = ARGV[3 * i - 2]
end
local delays = batched_zmscore(KEYS[2], rows)
local out, gone, dropped, stored, due = {}, {}, {}, {}, {}
-- Each due time formatted once (rows mostly share a delay): Redis formats every
-- number a script passes it, and formatting was a tenth of its time here.
local formatted = {}
local function at(seconds)
  local s = formatted[seconds]
  if not s then
    s = string.format('%.17g', now + seconds)
    formatted[seconds] = s
  end
  return s
end
for i = 1, n do
  local row, mode, value = rows[i], ARGV[3 * i - 1], ARGV[3 * i]
  local inv = KEYS[2 + i]
  local delay = tonumber(delays[i] or '0')
  if delay <= 0 or mode == 'missing' then
    -- Unscheduled meanwhile, or the row no longer exists: it leaves the cache.
    gone[#gone + 1] = row
    dropped[#dropped + 1] = inv
    out[i] = 0
  elseif mode == 'unscheduled' then
    -- Scheduled again since the claim: it stays, due as the new schedule says.
    out[i] = 3
  elseif mode == 'retry' then
    -- The database failed: keep the old value, try again after the back-off.
    due[#due + 1] = at(tonumber(value))
    due[#due + 1] = row
    out[i] = 2
  else
    stored[#stored + 1] = inv
    stored[#stored + 1] = value
    due[#due + 1] = at(delay)
    due[#due + 1] = row
    out[i] = 1
  end
end
batched('ZREM', KEYS[1], gone, 1)
batched('ZREM', KEYS[2], gone, 1)
batched('DEL', nil, dropped, 1)
batched('MSET', nil, stored, 2)
batched('ZADD', KEYS[1], due, 2)
return out
