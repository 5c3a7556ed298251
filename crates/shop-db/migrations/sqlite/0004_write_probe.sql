-- One row the health check updates: a real write, so a full disk or a read-only
-- file shows as "cannot write" (BEGIN alone writes nothing).
CREATE TABLE write_probe (
    id INTEGER PRIMARY KEY,
    probed_at BIGINT NOT NULL
);
INSERT INTO write_probe (id, probed_at) VALUES (1, 0);
