-- Indexes a page under one of its tags before the page is stored, and says whether
-- it may be stored: not if the tag was purged after the page's render began.
-- KEYS[1] ptag:<tag> (sorted set: page hash -> unix ms until which the page is kept)
-- KEYS[2] ptag-purged:<tag> (same slot)
-- ARGV[1] the page's hash   ARGV[2] how long the page is kept, in ms
-- ARGV[3] the purge epoch the render read before it read the database
-- Returns 1 (store it) or 0 (a purge since: the page may show old content).
-- Indexed even when refused: a purge that read the index before this ran would
-- miss the page, but then its mark is older than ARGV[3] and this returns 1; a
-- purge after this finds the page in the index and leaves a tombstone on it
-- however the store goes. Either way no old page outlives a purge.
-- The index holds only pages still kept: entries past their time are trimmed
-- here, so it never grows beyond the pages alive under the tag.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- GT: a new entry is added; an existing one only ever kept longer.
redis.call('ZADD', KEYS[1], 'GT', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local purged = tonumber(redis.call('GET', KEYS[2]) or '0')
if purged > tonumber(ARGV[3]) then
  return 0
end
return 1
