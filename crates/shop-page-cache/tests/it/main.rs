//! Integration tests of the page store and its events, each against its own Redis:
//! most run twice, on a single `redis-server` with the book's key layout and on a
//! private 6-node Redis Cluster with the cluster layout (`shop_cache::both_layouts!`),
//! and the example app run as a process.

mod example;
mod page_events;
mod page_store;

pub use shop_cache::both_layouts;
pub use shop_cache::testing::Fixture;
