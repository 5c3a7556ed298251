//! The Redis layer of the shop: everything the web tier keeps hot in Redis, with no HTTP.
//!
//! Each module holds one kind of data and the operations on it; a daemon's single
//! `step()` lives beside the data it works on. Key names come only from [`keys`],
//! Lua scripts only from [`scripts`]. Input from the outside world is parsed once
//! into the newtypes of [`domain`] (and [`session::SessionToken`]) before anything
//! here touches Redis, so a bad value is a typed error and never a write.
//!
//! ```no_run
//! # async fn demo() -> Result<(), shop_cache::CacheError> {
//! use shop_cache::{keys::Keys, session::{Sessions, SessionToken, Touch}};
//! let conn = shop_cache::connect("redis://127.0.0.1:6379").await?;
//! let sessions = Sessions::new(conn, Keys::default());
//! let token = SessionToken::generate();
//! sessions.touch(&token, Touch::request()).await?;
//! assert_eq!(sessions.check_token(&token).await?, None);
//! # Ok(()) }
//! ```

pub mod analytics;
#[cfg(feature = "book")]
pub mod book;
pub mod cart;
pub mod daemon;
pub mod error;
pub mod flash_sale;
pub mod insights;
pub mod keys;
pub mod lock;
pub mod login_limit;
pub mod repeating;
pub mod row_cache;
pub mod scripts;
pub mod session;
pub mod session_cleaner;
#[cfg(feature = "testing")]
pub mod testing;

mod clock;
pub mod connection;

pub use connection::{
    BudgetExceeded, NodesFailing, RedisConn, connect, connect_cluster, connect_pooled, connect_with,
};
pub use error::CacheError;
/// The identifiers shared with the SQL layer.
pub use shop_domain as domain;
