-- The page cache's purge epoch and generation, in one hash (the state Redis):
-- `epoch`, the purge counter (a render reads it before it reads the database; a
-- purge advances it), and `since`, the epoch at which this generation of the
-- state began. A state Redis that lost its data (restarted empty, flushed, a
-- replica that missed writes took over) has lost the tag indexes a purge reads, so
-- a purge could not find the pages it must remove: the hash is gone too, and the
-- first call after the loss starts a new generation, whose `since` every web
-- server learns (the caller publishes it): every page and tier copy stored under
-- an older epoch than `since` is then treated as purged.
-- Epochs come from Redis's clock in microseconds (each at least one more than the
-- last), so they never go backwards: not across a generation, nor on a replica
-- that missed the last increments.
-- KEYS[1] page-purges   ARGV[1] '1' to advance the epoch (a purge), '0' to read it
-- Returns {epoch, since, 1 if this call started the generation else 0}: the caller
-- that started it publishes it, so every web server learns it at once.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local held = redis.call('HMGET', KEYS[1], 'epoch', 'since')
local epoch, since = tonumber(held[1]), tonumber(held[2])
local started = 0
if not since then
  started = 1
  since = math.max(now, (epoch or 0) + 1)
  epoch = since
  redis.call('HSET', KEYS[1], 'epoch', string.format('%.0f', epoch),
    'since', string.format('%.0f', since))
elseif ARGV[1] == '1' then
  epoch = math.max((epoch or 0) + 1, now)
  redis.call('HSET', KEYS[1], 'epoch', string.format('%.0f', epoch))
end
return {string.format('%.0f', epoch), string.format('%.0f', since), started}
