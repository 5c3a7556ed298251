-- Claims the earliest due rows, up to a batch, for one refresher. A claimed row
-- stays in schedule: (never lost), pushed a lease into the future so no other
-- refresher takes it while this one reads the database; finishing reschedules it
-- properly (finish_row.lua).
-- KEYS[1] schedule:  KEYS[2] delay:
-- ARGV[1] lease in seconds   ARGV[2] most rows to claim
-- Returns strings (Lua numbers would be truncated):
--   {'idle', seconds until the next due row or '-1' when none}
--   {'claimed', row, delay, row, delay, ...}; a delay '0' when it is missing or
--   <= 0: the caller removes that row with finish_row.lua (mode 'unscheduled'),
--   which holds its key
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
if #due == 0 then
  local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #nxt == 0 then
    return {'idle', '-1'}
  end
  return {'idle', tostring(tonumber(nxt[2]) - now)}
end
-- One command of each kind for the whole batch (batched.lua).
local delays = batched_zmscore(KEYS[2], due)
local out = {'claimed'}
local leased = {}
-- Formatted once: Redis formats every number a script passes it, and formatting
-- was a tenth of its time here.
local lease = string.format('%.17g', now + tonumber(ARGV[1]))
for i, row in ipairs(due) do
  leased[#leased + 1] = lease
  leased[#leased + 1] = row
  local delay = delays[i]
  out[#out + 1] = row
  if not delay or tonumber(delay) <= 0 then
    out[#out + 1] = '0'
  else
    out[#out + 1] = delay
  end
end
batched('ZADD', KEYS[1], leased, 2)
return out
