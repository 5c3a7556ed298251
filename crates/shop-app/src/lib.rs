//! The shop's workflows: what one request or command does when it needs both
//! Redis (`shop-cache`) and the database (`shop-db`), in the order that keeps the
//! two consistent.
//!
//! The web tier parses a request, calls one workflow here and renders its answer;
//! the binary calls the same workflows from its commands. Dependencies point one
//! way: `shop-web -> shop-app -> shop-cache / shop-db -> shop-domain`.
//!
//! - [`catalogue`]: adding, editing, retiring and importing items (the database
//!   first, then the purge of every cached page that showed them) and the import
//!   file's format ([`import`]);
//! - [`accounts`]: logging in, signing up (the login limits, the password or the
//!   new account, the session moved to a new token with the cart carried) and
//!   logging out;
//! - [`orders`]: checkout (the cart becomes an order, then the cart is emptied and
//!   the order's insights recorded);
//! - [`flash`]: a flash-sale buy, decided in Redis (reserve, record the order,
//!   settle) or in the database;
//! - [`sale`]: starting a sale (the database's record, Redis's stock, the row cache,
//!   the sale page) and the database as the reconciler's ledger;
//! - [`rows`]: the database as the row cache's source;
//! - [`page_tags`]: what the shop's cached pages are tagged with.
//!
//! Each workflow borrows the stores it works on in a small struct, so a caller
//! with its own state (the web tier's `AppState`, a command's connections) lends
//! them without handing over ownership.

pub mod accounts;
pub mod catalogue;
pub mod error;
pub mod flash;
pub mod import;
pub mod orders;
pub mod page_tags;
pub mod rows;
pub mod sale;

pub use error::AppError;
