-- The view flusher's distinct viewers: many items' HyperLogLogs in one call (all
-- in one slot: the book layout sends every item in one call, the cluster layout
-- one call per item).
-- KEYS: viewers:<item>:<window>, one per item
-- ARGV[1] seconds a new key lives; then for each key in order: the number of
-- viewers n, and n session tokens
local ttl = ARGV[1]
local a = 2
for k = 1, #KEYS do
  local n = tonumber(ARGV[a])
  -- In parts: unpack takes a few thousand values at most.
  local i, last = a + 1, a + n
  while i <= last do
    local j = math.min(i + 999, last)
    redis.call('PFADD', KEYS[k], unpack(ARGV, i, j))
    i = j + 1
  end
  -- Only a new key gets its lifetime (as the touch script does).
  redis.call('EXPIRE', KEYS[k], ttl, 'NX')
  a = a + 1 + n
end
return #KEYS
