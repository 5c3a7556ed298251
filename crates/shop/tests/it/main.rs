//! The `shop` binary driven as a user (or a service manager) drives it.

mod work;
