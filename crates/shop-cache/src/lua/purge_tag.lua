-- One tag's part of a purge: marks the tag purged at this epoch (so a render that
-- began before it is not stored) and hands back the pages that showed it, whose
-- entries the caller then replaces by tombstones.
-- KEYS[1] ptag:<tag>   KEYS[2] ptag-purged:<tag>
-- ARGV[1] the purge's epoch   ARGV[2] how long the mark is kept, in ms
-- Returns the page hashes.
local mark = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) > mark then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
local pages = redis.call('SMEMBERS', KEYS[1])
redis.call('DEL', KEYS[1])
return pages
