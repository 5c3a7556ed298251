-- Browsing and search (issue 13).
--
-- Category pages page by id within a category: (category, id) so
-- `category = $1 AND id > $2 ORDER BY id LIMIT n` reads n index entries.
DROP INDEX items_category;
CREATE INDEX items_category ON items (category, id);

-- Full-text search: a generated tsvector (English stemming; the title weighs more
-- than the description) with a GIN index.
ALTER TABLE items ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', title), 'A') ||
    setweight(to_tsvector('english', description), 'B')
) STORED;
CREATE INDEX items_search ON items USING GIN (search);
