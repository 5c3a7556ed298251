-- One buy of one unit in a flash sale, decided here: the reservation made earlier
-- for this (user, idempotency key), else a refusal (window, per-user limit, stock,
-- the price the buyer was shown), else a reservation: one unit taken from the
-- stock and counted for the user, to be confirmed once its order is in the
-- database (sale_settle.lua).
-- KEYS[1] sale  KEYS[2] buyers  KEYS[3] answers  KEYS[4] pending  KEYS[5] held
-- ARGV[1] user id  ARGV[2] idempotency key  ARGV[3] now (unix seconds)
-- ARGV[4] when the reservation's order is overdue  ARGV[5] per-user limit
-- ARGV[6] the price in cents the buyer was shown, or '' for whatever it is
-- Returns {'earlier', answer} | {'refused', code} | {'reserved', number}.
local field = ARGV[1] .. ':' .. ARGV[2]
local earlier = redis.call('HGET', KEYS[3], field)
if earlier then
  return {'earlier', earlier}
end
local sale = redis.call('HMGET', KEYS[1], 'stock', 'start', 'end', 'expire_at', 'price_cents')
if not sale[1] then
  -- No sale loaded: nothing to remember either.
  return {'refused', 'not_on_sale'}
end
local now = tonumber(ARGV[3])
local answer
if now < tonumber(sale[2]) or now >= tonumber(sale[3]) then
  answer = 'not_on_sale'
elseif tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') >= tonumber(ARGV[5]) then
  answer = 'limit_reached'
elseif tonumber(sale[1]) <= 0 then
  answer = 'sold_out'
elseif ARGV[6] ~= '' and sale[5] and sale[5] ~= ARGV[6] then
  -- The database decides the price too (at the order's commit); refused here, a
  -- buy at a price that is gone holds no unit another buyer could have had.
  -- (After the refusals no price changes: a sold-out sale says so first.)
  answer = 'price_changed'
end
-- A refusal is not remembered: asked again, it is decided again (and the same, or
-- better: a unit an expired reservation gave back). Remembering every refusal let
-- one client looping buys with fresh keys grow the answers by megabytes a minute;
-- what is remembered is the answer of a reservation the database recorded (a unit
-- bought, bounded by the stock; one the reconciler fenced off), and a refusal the
-- database gave a reservation is forgotten too (sale_settle.lua).
if answer then
  return {'refused', answer}
end
redis.call('HINCRBY', KEYS[1], 'stock', -1)
local n = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('ZADD', KEYS[4], ARGV[4], n)
redis.call('HSET', KEYS[5], n, field)
redis.call('HSET', KEYS[3], field, 'pending:' .. n)
for i = 2, 5 do
  redis.call('EXPIREAT', KEYS[i], sale[4])
end
return {'reserved', tostring(n)}
