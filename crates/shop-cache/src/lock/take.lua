-- Takes a lock for one holder, unless that holder gave it up already: its take
-- went unanswered (a stalled node) and it marked the lock abandoned, so this
-- take, arriving late, must not hold the lock for nobody.
-- KEYS[1] the lock   KEYS[2] the holder's "abandoned" mark (same slot)
-- ARGV[1] the holder's random value   ARGV[2] the lock's time, milliseconds
if redis.call('EXISTS', KEYS[2]) == 1 then
  return false
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
