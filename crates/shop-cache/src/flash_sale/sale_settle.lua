-- Ends a reservation, once: 'confirm' (its order is in the database), 'release'
-- (no order: the unit goes back on sale) or 'void' (no order, and the database
-- has no unit to give back). The user's count drops unless confirmed, and the
-- answer for the attempt becomes ARGV[3]. 0 if it was already settled.
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
if ARGV[2] ~= 'confirm' then
  if ARGV[2] == 'release' and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'stock', 1)
  end
  local user = string.match(field, '^(%d+):')
  if user and redis.call('HINCRBY', KEYS[2], user, -1) <= 0 then
    redis.call('HDEL', KEYS[2], user)
  end
end
redis.call('HSET', KEYS[3], field, ARGV[3])
return 1
