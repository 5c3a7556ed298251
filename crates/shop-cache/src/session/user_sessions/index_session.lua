-- Lists a session in its user's index of sessions and says how many are listed,
-- in one round trip (the login's count for the cap per user).
-- KEYS[1] user-sessions:<user>
-- ARGV[1] the session's id   ARGV[2] its entry (token, login time, device)
-- Returns the number of entries now listed.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HLEN', KEYS[1])
