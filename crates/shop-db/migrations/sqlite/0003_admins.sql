-- Admins may open the operations page (`shop users grant-admin NAME`). 0 or 1.
ALTER TABLE users ADD COLUMN is_admin INTEGER NOT NULL DEFAULT 0;
