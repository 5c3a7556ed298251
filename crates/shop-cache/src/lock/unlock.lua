-- Releases a lock only if this holder still owns it (it may have expired and been
-- taken by another). KEYS[1] the lock   ARGV[1] the holder's random value
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
