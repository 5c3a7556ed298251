//! The shop's relational store: users, the catalogue, inventory and sale windows,
//! orders. One repository API over SQLite (the embedded default: a file, WAL mode,
//! a busy timeout) and PostgreSQL (chosen by a `postgres://` URL), through sqlx's
//! `Any` driver; each backend has its own migrations, run at connect.
//!
//! SQL here is written once for both backends: `$1, $2, ...` placeholders in order
//! of first use (SQLite numbers `$N` parameters by first appearance), `BIGINT`-sized
//! integers, unix-second timestamps, `ON CONFLICT` and `RETURNING` (both support them).

mod db;
mod error;
pub mod flash;
pub mod inventory;
pub mod items;
pub mod orders;
pub mod seed;
pub mod users;

pub use db::{Backend, Db};
pub use error::DbError;

/// Unix time in whole seconds, the unit of every timestamp column.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
