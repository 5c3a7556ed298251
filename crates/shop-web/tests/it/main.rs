//! Integration tests of the web tier, each against its own `redis-server`.

mod browse;
mod db_faults;
mod example;
mod fuzz;
mod layers;
mod ops;
mod page_cache;
mod routes;
mod support;
