//! The shop's HTTP tier: axum routes and the tower layers around them.
//!
//! Each route module exports a `router()`; [`router`] merges them over one
//! [`AppState`]. Errors from the layers below become HTTP answers in one place,
//! [`error::WebError`]. Today it serves the flash sale (`/flash`, its JSON endpoints)
//! and `/healthz`; the full shop (pages, carts, login) arrives with the web issue.

pub mod error;
pub mod flash;
pub mod health;
pub mod page_cache;
pub mod session;

use axum::Router;
use shop_cache::page_cache::PageStore;
use shop_cache::row_cache::RowCache;
use shop_cache::session::Sessions;
use shop_db::Db;

/// What every handler may use. Cheap to clone: every field is a shared handle.
#[derive(Clone)]
pub struct AppState {
    /// The relational store.
    pub db: Db,
    /// Login sessions in Redis.
    pub sessions: Sessions,
    /// Cached database rows (`inv:<id>`).
    pub rows: RowCache,
    /// Where whole pages are cached.
    pub pages: PageStore,
    /// Most units of one sale item a user may buy.
    pub flash_limit: i64,
}

/// The whole application.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(flash::router(state.clone()))
        .merge(health::router(state))
}
