-- Indexes a page under one of its tags before the page is stored, and says whether
-- it may be stored: not if the tag was purged after the page's render began.
-- KEYS[1] ptag:<tag> (set of page hashes)   KEYS[2] ptag-purged:<tag> (same slot)
-- ARGV[1] the page's hash   ARGV[2] the set's lifetime in ms (the pages' longest)
-- ARGV[3] the purge epoch the render read before it read the database
-- Returns 1 (store it) or 0 (a purge since: the page may show old content).
-- Indexed even when refused: a purge that read the set before this ran would miss
-- the page, but then its mark is older than ARGV[3] and this returns 1; a purge
-- after this finds the page in the set and marks it (tombstone) however the store
-- goes. Either way no old page outlives a purge.
redis.call('SADD', KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local purged = tonumber(redis.call('GET', KEYS[2]) or '0')
if purged > tonumber(ARGV[3]) then
  return 0
end
return 1
