-- Times are unix seconds; money is integer cents.
CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL UNIQUE,
    password_hash TEXT    NOT NULL,
    created_at    INTEGER NOT NULL
);

CREATE TABLE items (
    id          INTEGER PRIMARY KEY,
    title       TEXT    NOT NULL,
    description TEXT    NOT NULL,
    price_cents INTEGER NOT NULL CHECK (price_cents >= 0),
    category    TEXT    NOT NULL
);
CREATE INDEX items_category ON items (category);

CREATE TABLE inventory (
    item_id          INTEGER PRIMARY KEY REFERENCES items (id),
    stock            INTEGER NOT NULL CHECK (stock >= 0),
    sale_price_cents INTEGER CHECK (sale_price_cents >= 0),
    sale_start       INTEGER,
    sale_end         INTEGER
);

CREATE TABLE orders (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id         INTEGER NOT NULL REFERENCES users (id),
    idempotency_key TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    total_cents     INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    UNIQUE (user_id, idempotency_key)
);

CREATE TABLE order_lines (
    order_id    INTEGER NOT NULL REFERENCES orders (id),
    item_id     INTEGER NOT NULL REFERENCES items (id),
    quantity    INTEGER NOT NULL CHECK (quantity > 0),
    price_cents INTEGER NOT NULL,
    PRIMARY KEY (order_id, item_id)
);

-- How many of a sale item each user has bought: the per-user limit.
CREATE TABLE flash_claims (
    user_id INTEGER NOT NULL REFERENCES users (id),
    item_id INTEGER NOT NULL REFERENCES items (id),
    bought  INTEGER NOT NULL,
    PRIMARY KEY (user_id, item_id)
);

-- The answer given to each (user, Idempotency-Key), so a retry gets the same one.
CREATE TABLE flash_attempts (
    user_id         INTEGER NOT NULL REFERENCES users (id),
    idempotency_key TEXT    NOT NULL,
    item_id         INTEGER NOT NULL,
    outcome         TEXT    NOT NULL,
    order_id        INTEGER REFERENCES orders (id),
    PRIMARY KEY (user_id, idempotency_key)
);
