-- Browsing and search (issue 13).
--
-- Category pages page by id within a category: the index on (category) already
-- ends in the rowid (id), so `category = ? AND id > ? ORDER BY id` walks it.
--
-- Full-text search: an FTS5 index over titles and descriptions, kept in step with
-- `items` by triggers (external content: the text is stored once, in `items`).
-- Porter stemming over the unicode61 tokenizer, accents folded.
CREATE VIRTUAL TABLE items_search USING fts5(
    title,
    description,
    content = 'items',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER items_search_insert AFTER INSERT ON items BEGIN
    INSERT INTO items_search (rowid, title, description)
    VALUES (new.id, new.title, new.description);
END;

CREATE TRIGGER items_search_delete AFTER DELETE ON items BEGIN
    INSERT INTO items_search (items_search, rowid, title, description)
    VALUES ('delete', old.id, old.title, old.description);
END;

CREATE TRIGGER items_search_update AFTER UPDATE OF title, description ON items BEGIN
    INSERT INTO items_search (items_search, rowid, title, description)
    VALUES ('delete', old.id, old.title, old.description);
    INSERT INTO items_search (rowid, title, description)
    VALUES (new.id, new.title, new.description);
END;

-- Items already in the catalogue.
INSERT INTO items_search (items_search) VALUES ('rebuild');
