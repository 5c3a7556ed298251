-- Claims the earliest due row for one refresher. A claimed row stays in schedule:
-- (never lost), pushed a lease into the future so no other refresher takes it while
-- this one reads the database; finishing reschedules it properly.
-- KEYS[1] schedule:  KEYS[2] delay:
-- ARGV[1] lease in seconds  ARGV[2] inv:<row> key prefix
-- Returns {what, row, number} as strings (Lua numbers would be truncated):
--   {'idle', '', seconds until the next due row or '-1' when none}
--   {'removed', row, '0'}: delay missing or <= 0, so the row left the cache
--   {'claimed', row, delay}
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
if delay <= 0 then
  redis.call('ZREM', KEYS[1], row)
  redis.call('ZREM', KEYS[2], row)
  redis.call('DEL', ARGV[2] .. row)
  return {'removed', row, '0'}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), row)
return {'claimed', row, tostring(delay)}
