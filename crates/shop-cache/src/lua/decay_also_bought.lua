-- Brings a batch of also-bought lists to the latest view rescale: a list last decayed
-- to rescale e is halved (cur - e) times at once (a list never decayed: once), then
-- marked as at cur, so repeating the batch after a failure halves nothing twice.
-- KEYS[2i - 1] the hash item id -> rescale number reached that holds item i's mark
-- KEYS[2i] also:<item i>   (the items' keys share a slot: the caller groups them)
-- ARGV[1] the current rescale number   ARGV[i + 1] item i
-- Returns how many lists were halved.
local cur = tonumber(ARGV[1])
local halved = 0
for i = 1, #ARGV - 1 do
  local item = ARGV[i + 1]
  local marks, list = KEYS[2 * i - 1], KEYS[2 * i]
  local last = tonumber(redis.call('HGET', marks, item) or (cur - 1))
  local steps = cur - last
  if steps > 0 then
    local weight = 0.5 ^ math.min(steps, 60)
    redis.call('ZINTERSTORE', list, 1, list, 'WEIGHTS', weight)
    redis.call('ZREMRANGEBYSCORE', list, '-inf', '(0.5')
    halved = halved + 1
    -- Only forwards: a slow worker still on an older rescale must not mark a list
    -- as behind a newer one it was already brought to.
    redis.call('HSET', marks, item, cur)
  end
end
return halved
