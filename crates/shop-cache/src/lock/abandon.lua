-- Gives up a lock whose take went unanswered: marks it abandoned (a take that
-- arrives later is refused), and lets it go if the take already ran.
-- KEYS[1] the lock   KEYS[2] the holder's "abandoned" mark (same slot)
-- ARGV[1] the holder's random value   ARGV[2] the lock's time, milliseconds
redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
