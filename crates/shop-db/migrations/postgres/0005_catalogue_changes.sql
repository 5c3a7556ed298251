-- A catalogue that changes (issue 24).
--
-- An item is retired, never deleted (old orders name it): `retired_at` is when
-- (unix seconds), NULL while it is sold. Listings and search read the live items
-- only, through partial indexes, so retired items cost browsing nothing.
ALTER TABLE items ADD COLUMN retired_at BIGINT;

DROP INDEX items_category;
CREATE INDEX items_category ON items (category, id) WHERE retired_at IS NULL;
CREATE INDEX items_live ON items (id) WHERE retired_at IS NULL;
DROP INDEX items_search;
CREATE INDEX items_search ON items USING GIN (search) WHERE retired_at IS NULL;
