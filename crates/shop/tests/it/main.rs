//! The `shop` crate's tests: the wiring of the layers (row cache over the real
//! database, the flash sale over HTTP) and the binary driven as a user drives it.

mod account_cart;
mod browser;
mod cli;
mod cluster;
mod dead_node;
mod defaults;
mod drills;
mod e2e;
mod edge;
mod flash_e2e;
mod items;
mod load;
mod row_cache;
mod serve_limits;
mod stall;
mod work;

use std::process::Command;

/// The `shop` binary with a clean environment: no setting leaks in from the shell.
pub fn shop() -> Command {
    shop_testapp::clean_command(env!("CARGO_BIN_EXE_shop"))
}
