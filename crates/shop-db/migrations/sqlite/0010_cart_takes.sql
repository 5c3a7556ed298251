-- A cart order's lines leave the shopper's cart (in Redis) after the order's
-- commit. `cart_taken` is 0 until that is done, so a take that failed (Redis
-- away, the server gone) is done later: before the cart is read for another
-- checkout, and by the workers' sweep. The same lines are never ordered twice
-- because their first take failed. Orders before this migration, and flash
-- orders, have no cart lines to take.
ALTER TABLE orders ADD COLUMN cart_taken INTEGER NOT NULL DEFAULT 1;
CREATE INDEX orders_cart_untaken ON orders (user_id) WHERE cart_taken = 0;
