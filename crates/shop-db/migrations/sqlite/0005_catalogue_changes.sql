-- A catalogue that changes (issue 24).
--
-- An item is retired, never deleted (old orders name it): `retired_at` is when
-- (unix seconds), NULL while it is sold. Every listing reads the live items only,
-- through a partial index, so retired items cost browsing nothing.
ALTER TABLE items ADD COLUMN retired_at INTEGER;

DROP INDEX items_category;
CREATE INDEX items_category ON items (category) WHERE retired_at IS NULL;
CREATE INDEX items_live ON items (id) WHERE retired_at IS NULL;

-- The search index holds live items only: a retired item leaves it, an item
-- brought back returns. One trigger does both halves of an update in order (the
-- old text out, then the new in): FTS5 must be told the exact text it indexed.
DROP TRIGGER items_search_insert;
DROP TRIGGER items_search_delete;
DROP TRIGGER items_search_update;

CREATE TRIGGER items_search_insert AFTER INSERT ON items WHEN new.retired_at IS NULL BEGIN
    INSERT INTO items_search (rowid, title, description)
    VALUES (new.id, new.title, new.description);
END;

CREATE TRIGGER items_search_delete AFTER DELETE ON items WHEN old.retired_at IS NULL BEGIN
    INSERT INTO items_search (items_search, rowid, title, description)
    VALUES ('delete', old.id, old.title, old.description);
END;

CREATE TRIGGER items_search_update AFTER UPDATE OF title, description, retired_at ON items BEGIN
    INSERT INTO items_search (items_search, rowid, title, description)
    SELECT 'delete', old.id, old.title, old.description WHERE old.retired_at IS NULL;
    INSERT INTO items_search (rowid, title, description)
    SELECT new.id, new.title, new.description WHERE new.retired_at IS NULL;
END;
