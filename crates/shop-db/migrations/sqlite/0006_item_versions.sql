-- Every item has a version that each change to it bumps (an edit, an import
-- line that changes it, a retirement), so an edit made from an older copy (an
-- admin's form, a script's --if-version) is refused instead of silently writing
-- the old values back.
ALTER TABLE items ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
