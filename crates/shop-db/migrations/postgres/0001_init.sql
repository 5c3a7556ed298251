-- Times are unix seconds; money is integer cents.
CREATE TABLE users (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          TEXT    NOT NULL UNIQUE,
    password_hash TEXT    NOT NULL,
    created_at    BIGINT  NOT NULL
);

CREATE TABLE items (
    id          BIGINT PRIMARY KEY,
    title       TEXT    NOT NULL,
    description TEXT    NOT NULL,
    price_cents BIGINT  NOT NULL CHECK (price_cents >= 0),
    category    TEXT    NOT NULL
);
CREATE INDEX items_category ON items (category);

CREATE TABLE inventory (
    item_id          BIGINT  PRIMARY KEY REFERENCES items (id),
    stock            BIGINT  NOT NULL CHECK (stock >= 0),
    sale_price_cents BIGINT  CHECK (sale_price_cents >= 0),
    sale_start       BIGINT ,
    sale_end         BIGINT 
);

CREATE TABLE orders (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id         BIGINT  NOT NULL REFERENCES users (id),
    idempotency_key TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    total_cents     BIGINT  NOT NULL,
    created_at      BIGINT  NOT NULL,
    UNIQUE (user_id, idempotency_key)
);

CREATE TABLE order_lines (
    order_id    BIGINT  NOT NULL REFERENCES orders (id),
    item_id     BIGINT  NOT NULL REFERENCES items (id),
    quantity    BIGINT  NOT NULL CHECK (quantity > 0),
    price_cents BIGINT  NOT NULL,
    PRIMARY KEY (order_id, item_id)
);

-- How many of a sale item each user has bought: the per-user limit.
CREATE TABLE flash_claims (
    user_id BIGINT  NOT NULL REFERENCES users (id),
    item_id BIGINT  NOT NULL REFERENCES items (id),
    bought  BIGINT  NOT NULL,
    PRIMARY KEY (user_id, item_id)
);

-- The answer given to each (user, Idempotency-Key), so a retry gets the same one.
CREATE TABLE flash_attempts (
    user_id         BIGINT  NOT NULL REFERENCES users (id),
    idempotency_key TEXT    NOT NULL,
    item_id         BIGINT  NOT NULL,
    outcome         TEXT    NOT NULL,
    order_id        BIGINT  REFERENCES orders (id),
    PRIMARY KEY (user_id, idempotency_key)
);
