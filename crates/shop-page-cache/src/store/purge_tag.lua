-- One tag's part of a purge: marks the tag purged at this epoch (so a render that
-- began before it is not stored) and hands back the pages indexed under it, which
-- the caller then marks with tombstones (tombstone.lua).
-- KEYS[1] ptag:<tag>   KEYS[2] ptag-purged:<tag>
-- ARGV[1] the purge's epoch   ARGV[2] how long the mark is kept, in ms
-- Returns the page hashes. The index is left as it is (its entries expire with
-- their pages): a purge retried after its tombstones failed finds them again.
local mark = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) > mark then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGE', KEYS[1], now, '+inf', 'BYSCORE')
