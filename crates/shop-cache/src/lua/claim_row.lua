-- Claims the earliest due row for one refresher. A claimed row stays in schedule:
-- (never lost), pushed a lease into the future so no other refresher takes it while
-- this one reads the database; finishing reschedules it properly.
-- KEYS[1] schedule:  KEYS[2] delay:
-- ARGV[1] lease in seconds
-- Returns {what, row, number} as strings (Lua numbers would be truncated):
--   {'idle', '', seconds until the next due row or '-1' when none}
--   {'claimed', row, delay}; delay '0' when it is missing or <= 0: the caller
--   removes the row with finish_row.lua (mode 'unscheduled'), which holds its key
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, 1)
if #due == 0 then
  local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #nxt == 0 then
    return {'idle', '', '-1'}
  end
  return {'idle', '', tostring(tonumber(nxt[2]) - now)}
end
local row = due[1]
local delay = tonumber(redis.call('ZSCORE', KEYS[2], row) or '0')
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), row)
if delay <= 0 then
  return {'claimed', row, '0'}
end
return {'claimed', row, tostring(delay)}
