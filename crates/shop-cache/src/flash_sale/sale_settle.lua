-- Ends a reservation, once: 'confirm' (its order is in the database), 'release'
-- (no order, the database holds the attempt's answer: the unit goes back on
-- sale), 'refuse' (no order, the database recorded nothing: the unit goes back
-- on sale) or 'void' (no order, nothing recorded, and the database has no unit
-- to give back). The user's count drops unless confirmed. The answer for the
-- attempt becomes ARGV[3] where the database holds one (confirm, release);
-- a refused or voided attempt is forgotten, so asked again it is decided again
-- and answers stay one per unit the database remembers. 0 if already settled.
-- KEYS[1] sale  KEYS[2] buyers  KEYS[3] answers  KEYS[4] pending  KEYS[5] held
-- ARGV[1] reservation number  ARGV[2] mode  ARGV[3] the attempt's answer
if redis.call('ZREM', KEYS[4], ARGV[1]) == 0 then
  return 0
end
local field = redis.call('HGET', KEYS[5], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
if not field then
  return 1
end
local mode = ARGV[2]
if mode ~= 'confirm' then
  if mode ~= 'void' and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'stock', 1)
  end
  local user = string.match(field, '^(%d+):')
  if user and redis.call('HINCRBY', KEYS[2], user, -1) <= 0 then
    redis.call('HDEL', KEYS[2], user)
  end
end
if mode == 'confirm' or mode == 'release' then
  redis.call('HSET', KEYS[3], field, ARGV[3])
else
  redis.call('HDEL', KEYS[3], field)
end
return 1
