//! The shop's relational store: users, the catalogue, inventory and sale windows,
//! orders. One repository API over SQLite (the embedded default: a file, WAL mode)
//! and PostgreSQL (chosen by a `postgres://` URL), through sqlx's `Any` driver; each
//! backend has its own migrations, run at connect.
//!
//! Reads and writes use separate pools (see [`Db`]): writes give up within about
//! three seconds when the database is locked ([`DbError::is_unavailable`], a 503 for
//! the web tier) and can never take the connections reads need. Every write is a
//! [`WriteTx`], which answers success only once `COMMIT` succeeded and never lets a
//! connection whose write failed serve again ([`mod@write`]). Lists of ids are
//! bound at most 500 to a statement, so no caller's list can exceed a database's
//! parameter limit, and password hashing is bounded in concurrency and memory
//! ([`users`]).
//!
//! SQL here is written once for both backends: `$1, $2, ...` placeholders in order
//! of first use (SQLite numbers `$N` parameters by first appearance), `BIGINT`-sized
//! integers, unix-second timestamps, `ON CONFLICT` and `RETURNING` (both support them).

pub mod catalogue;
mod db;
mod error;
pub mod flash;
pub mod gate;
pub mod inventory;
pub mod items;
pub mod orders;
pub mod search;
pub mod seed;
pub mod users;
pub mod write;

pub use db::{Backend, Db, sqlite_path};
pub use error::DbError;
pub use write::WriteTx;

/// Unix time in whole seconds, the unit of every timestamp column.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
