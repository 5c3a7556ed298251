//! The shop's configuration. The settings of its long-running processes are one
//! typed struct, [`Settings`], in sections (`server`, `web`, `redis`, `database`,
//! `workers`, `edge`), layered: flags beat environment variables (`SHOP_*`, `REDIS_URL`,
//! `DATABASE_URL`), which beat a TOML settings file (`--config FILE`), which beats
//! the compiled-in defaults.
//!
//! Each setting is declared once, as a field of its section: its flag, variable,
//! default, range and help text are the field's `clap` attributes, and its key in
//! the file is the field's name (`serde`). The file is read with `serde` into the
//! same struct (unknown keys and wrong types are refused, naming the key); its
//! values then stand in for the compiled-in defaults, and `clap` parses the
//! command line and the environment over them, so every value, from wherever it
//! came, passes the same range checks: a bad one stops the process at start with
//! a message naming the setting. Connection URLs are [`SecretUrl`]s, which never
//! print their password.

mod cli;
mod edge;
mod file;
mod redis;
mod secret;
mod settings;
#[cfg(test)]
mod tests;

pub use cli::*;
pub use edge::EdgeSettings;
pub use file::parse;
pub use redis::RedisSettings;
pub use secret::{SecretUrl, redact_url};
pub use settings::*;
