-- Settles a counted login attempt on one account name (login_name_gate.lua counted
-- it): a success takes its count back (the limit counts failures only, so a
-- user's own logins never lock them out); a failure that leaves the counter at or
-- over the limit starts the slow-down (the slot), so the next try without a
-- device cookie waits one interval.
-- A failure made with a device cookie this shop issued for the name counts
-- against that cookie too (KEYS[3], for a window), which stops trusting it at the
-- limit (login_name_gate.lua).
-- KEYS[1] the name's counter   KEYS[2] the name's slow-down slot
-- KEYS[3] the device cookie's failures on this name (any key when there is none)
-- ARGV[1] '1' success, '0' failure   ARGV[2] the limit   ARGV[3] slow-down interval ms
-- ARGV[4] '1' when the attempt came with this account's device cookie
-- ARGV[5] window in milliseconds
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[1] == '1' then
  if n > 0 then
    redis.call('DECR', KEYS[1])
  end
else
  if n >= tonumber(ARGV[2]) then
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
  end
  if ARGV[4] == '1' and redis.call('INCR', KEYS[3]) == 1 then
    redis.call('PEXPIRE', KEYS[3], ARGV[5])
  end
end
return 1
