-- Brings a batch of also-bought lists to the latest view rescale: a list last decayed
-- to rescale e is halved (cur - e) times at once (a list never decayed: once), then
-- marked as at cur, so repeating the batch after a failure halves nothing twice.
-- KEYS[1] hash item id -> rescale number reached   KEYS[2..] also:<item> per item
-- ARGV[1] the current rescale number   ARGV[2..] the item ids, in KEYS order
-- Returns how many lists were halved.
local cur = tonumber(ARGV[1])
local halved = 0
for i = 2, #KEYS do
  local item = ARGV[i]
  local last = tonumber(redis.call('HGET', KEYS[1], item) or (cur - 1))
  local steps = cur - last
  if steps > 0 then
    local weight = 0.5 ^ math.min(steps, 60)
    redis.call('ZINTERSTORE', KEYS[i], 1, KEYS[i], 'WEIGHTS', weight)
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(0.5')
    halved = halved + 1
    -- Only forwards: a slow worker still on an older rescale must not mark a list
    -- as behind a newer one it was already brought to.
    redis.call('HSET', KEYS[1], item, cur)
  end
end
return halved
