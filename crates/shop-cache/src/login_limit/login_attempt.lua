-- Counts one login attempt against each of several fixed-window limits and allows it
-- only if every counter is within its limit. A refused attempt is still counted, so
-- hammering does not reopen the window early.
-- KEYS[i] an attempt counter (one per limit: client address, account name)
-- ARGV[1] window in milliseconds   ARGV[1 + i] the limit of KEYS[i]
-- Returns {allowed (1/0), milliseconds until the fullest refusing window ends}.
local allowed = 1
local wait = 0
for i = 1, #KEYS do
  local n = redis.call('INCR', KEYS[i])
  if n == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
  end
  if n > tonumber(ARGV[i + 1]) then
    allowed = 0
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then
      redis.call('PEXPIRE', KEYS[i], ARGV[1])
      ttl = tonumber(ARGV[1])
    end
    if ttl > wait then wait = ttl end
  end
end
return {allowed, wait}
