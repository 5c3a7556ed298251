//! The `shop` crate's tests: the wiring of the layers (row cache over the real
//! database, the flash sale over HTTP) and the binary driven as a user drives it.

mod browser;
mod cli;
mod cluster;
mod drills;
mod e2e;
mod flash;
mod flash_e2e;
mod load;
mod row_cache;
mod serve_limits;
mod work;

use std::process::{Command, Stdio};

/// The `shop` binary with a clean environment: no setting leaks in from the shell.
pub fn shop() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shop"));
    for (name, _) in std::env::vars() {
        if name.starts_with("SHOP_") || name == "REDIS_URL" || name == "DATABASE_URL" {
            cmd.env_remove(name);
        }
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}
