-- Decides whether a login attempt on one account name may check its password, and
-- counts it if so (counted before the check, so attempts racing each other cannot
-- all slip under the limit; a successful login takes its count back:
-- login_name_settle.lua, so only failures stay counted).
-- Under the limit: allowed. At it: a client holding this account's device cookie
-- (checked by the caller) is allowed; anyone else gets one attempt per slow-down
-- interval (the slot), so a locked name slows down rather than shutting its owner
-- out, and the password checks it costs stay bounded (at most the limit, plus one
-- per interval, per window).
-- A device cookie's holder goes through only while its own failures on this name
-- (KEYS[3]) stay under the limit: a stolen device cookie is no licence to guess.
-- KEYS[1] the name's counter   KEYS[2] the name's slow-down slot
-- KEYS[3] the device cookie's failures on this name (any key when there is none)
-- ARGV[1] window in milliseconds   ARGV[2] the limit   ARGV[3] slow-down interval ms
-- ARGV[4] '1' when the client holds this account's device cookie
-- Returns {allowed (1/0), milliseconds until the next try could go through}.
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit = tonumber(ARGV[2])
local trusted = ARGV[4] == '1' and tonumber(redis.call('GET', KEYS[3]) or '0') < limit
if n >= limit and not trusted then
  if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then
    local wait = redis.call('PTTL', KEYS[2])
    if wait < 0 then wait = tonumber(ARGV[3]) end
    return {0, wait}
  end
end
if redis.call('INCR', KEYS[1]) == 1 or redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {1, 0}
