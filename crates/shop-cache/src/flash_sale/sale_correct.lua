-- The reconciler's correction of a sale's stock to the database's, made only if
-- nothing happened since it looked: no reservation made (the same last number)
-- and none pending, so the database's stock is final for what Redis has seen;
-- and the stock still the one seen (a sale started again since, which keeps its
-- numbering, set a new one).
-- KEYS[1] sale  KEYS[2] pending
-- ARGV[1] the last reservation number seen  ARGV[2] the database's stock
-- ARGV[3] the stock seen
-- 1 if the stock was changed.
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[1] or redis.call('ZCARD', KEYS[2]) > 0
    or redis.call('HGET', KEYS[1], 'stock') ~= ARGV[3] then
  return 0
end
if redis.call('HGET', KEYS[1], 'stock') == ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'stock', ARGV[2])
return 1
