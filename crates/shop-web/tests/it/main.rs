//! Integration tests of the web tier, each against its own `redis-server`.

mod page_cache;
mod routes;
