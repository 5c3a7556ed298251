-- Stores a rendered page unless a purge since its render began left a tombstone.
-- KEYS[1] cache:<hash>   ARGV[1] the stored page   ARGV[2] its lifetime in ms
-- ARGV[3] the purge epoch the render read before it read the database
-- A tombstone is a value whose first byte is 0, then the purge's epoch in ASCII
-- (a stored page starts with its format version, never 0).
-- Returns 1 if stored, 0 if refused.
local head = redis.call('GETRANGE', KEYS[1], 0, 24)
if string.byte(head, 1) == 0 then
  local purged = tonumber(string.sub(head, 2)) or 0
  if purged > tonumber(ARGV[3]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
