-- Replaces a purged page by a tombstone of the purge's epoch, unless a newer
-- purge's tombstone is already there (two purges may write theirs in either
-- order; the newer epoch must win, or a render between them could be stored).
-- KEYS[1] cache:<hash>   ARGV[1] the tombstone (a 0 byte, then the epoch)
-- ARGV[2] the epoch   ARGV[3] how long it is kept, in ms
local head = redis.call('GETRANGE', KEYS[1], 0, 24)
if string.byte(head, 1) == 0 and (tonumber(string.sub(head, 2)) or 0) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
