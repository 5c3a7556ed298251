-- Settles a counted login attempt on one account name (login_name_gate.lua counted
-- it): a success takes its count back (the limit counts failures only, so a
-- user's own logins never lock them out); a failure that leaves the counter at or
-- over the limit starts the slow-down (the slot), so the next try without a
-- device cookie waits one interval.
-- KEYS[1] the name's counter   KEYS[2] the name's slow-down slot
-- ARGV[1] '1' success, '0' failure   ARGV[2] the limit   ARGV[3] slow-down interval ms
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[1] == '1' then
  if n > 0 then
    redis.call('DECR', KEYS[1])
  end
elseif n >= tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
end
return 1
