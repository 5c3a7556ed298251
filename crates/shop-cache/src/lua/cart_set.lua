-- Sets one cart line, refusing to add a line to a full cart (changing the quantity
-- of a line already there is always allowed).
-- KEYS[1] cart:<token>   ARGV[1] item id   ARGV[2] quantity   ARGV[3] most lines
-- Returns 1 when stored, 0 when the cart is full (nothing written).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
   and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
