-- A cart order's lines leave the shopper's cart (in Redis) after the order's
-- commit. `cart_taken` is 0 until that is done and a few seconds old (so a
-- take that failed, or that Redis lost, is done again): before the cart is
-- read for another checkout, and by the workers' sweep. So the same lines are
-- never ordered twice because their first take failed. Orders before this
-- migration, and flash orders, have no cart lines to take.
ALTER TABLE orders ADD COLUMN cart_taken INTEGER NOT NULL DEFAULT 1;
-- Few rows each: orders of the last seconds, and takes that failed (a shop
-- run without workers keeps each shopper's last order here until the next).
CREATE INDEX orders_cart_untaken ON orders (id) WHERE cart_taken = 0;
CREATE INDEX orders_cart_untaken_by_user ON orders (user_id, id) WHERE cart_taken = 0;
