-- A flash-sale order and a cart's order each answer the idempotency key their
-- own request carried: one key used for both (an API client's) must not make a
-- checkout answer with the flash order, nor a flash buy fail on the cart
-- order's key. Flash orders keep their key in `orders` as 'flash <key>' (a
-- client's key has no space); the attempt's own record, `flash_attempts`, keeps
-- the key as sent.
UPDATE orders SET idempotency_key = 'flash ' || idempotency_key
 WHERE kind = 'flash' AND idempotency_key NOT LIKE 'flash %';
