//! Integration tests of the web tier, each against its own `redis-server`: the
//! application through `shop_testapp::TestApp`, the layers alone on `TestRedis`.

mod auth;
mod browse;
mod cart;
mod catalogue;
mod checkout;
mod db_faults;
mod devices;
mod edits;
mod example;
mod flash;
mod fuzz;
mod insights;
mod layers;
mod me;
mod ops;
mod page_cache;
mod page_tier;
mod routes;
mod sessions;
mod storefront;
mod uncached;
mod view_shares;
