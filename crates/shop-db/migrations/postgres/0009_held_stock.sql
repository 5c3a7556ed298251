-- A flash sale's units are taken from the item's stock, not put in its place:
-- the units the item had beyond the sale's are kept back here while the sale
-- runs (or is coming) and return to `stock` when it ends (`sale stop`, a
-- retire, or its window passing: the web servers' sale-end step, and any stock
-- change or checkout of the item after the end).
ALTER TABLE inventory ADD COLUMN held_stock BIGINT NOT NULL DEFAULT 0 CHECK (held_stock >= 0);
CREATE INDEX inventory_held_stock ON inventory (sale_end) WHERE held_stock > 0;
