//! The shop's HTTP tier: axum routes and the tower layers around them.
//!
//! Today it holds the page-cache layer ([`page_cache::PageCacheLayer`]); the
//! routes, templates and the session layer arrive with the web shop.

pub mod page_cache;
