//! Which lines the shop logs: what `SHOP_LOG` says (`tracing`'s filter
//! directives), or [`DEFAULT`]; and what is never logged, whatever it says.

use tracing_subscriber::EnvFilter;

/// The filter when `SHOP_LOG` is unset or not a filter: the shop's lines at
/// `info` and above, redis-rs's errors only. redis-rs warns at each failed
/// reconnect to a cluster node (tens of lines a second per web server while
/// a node is gone), and the shop says the same once, naming the node, as its
/// breaker opens and closes. PostgreSQL's notices at `info` (each command's
/// migration check says "relation _sqlx_migrations already exists, skipping")
/// are left out too. `SHOP_LOG=info` shows both.
pub const DEFAULT: &str = "info,redis=error,sqlx::postgres::notice=warn";

/// The filter for `setting` (`SHOP_LOG`'s value, if set).
pub fn filter(setting: Option<&str>) -> EnvFilter {
    setting
        .and_then(|setting| EnvFilter::try_new(setting).ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT))
        // sqlx warns of every connect parameter it does not know with its value,
        // which may be a password (`?sslpassword=...`): never logged, whatever
        // SHOP_LOG says.
        .add_directive(
            "sqlx_postgres::options::parse=off"
                .parse()
                .expect("a valid directive"),
        )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::filter;

    /// A log writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What is logged through `filter(setting)` of the lines `emit` logs
    /// (a macro: each use is its own call sites, so what one filter decided
    /// for a call site is not what the next one sees).
    macro_rules! logged {
        ($setting:expr) => {{
            let capture = Capture::default();
            let writer = capture.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(filter($setting))
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                let node = "redis::cluster_handling::async_connection";
                tracing::warn!(target: "redis::cluster_handling::async_connection", "{node} warns");
                tracing::error!(target: "redis::aio", "redis-rs errs");
                tracing::info!(target: "shop_cache::connection", "the shop informs");
                tracing::debug!(target: "shop_cache::connection", "the shop debugs");
                tracing::warn!(target: "sqlx_postgres::options::parse", "sslpassword=hunter2");
                tracing::info!(target: "sqlx::postgres::notice", "already exists, skipping");
            });
            let text = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
            text
        }};
    }

    #[test]
    fn by_default_the_shop_says_info_and_redis_rs_only_its_errors() {
        let log = logged!(None);
        assert!(
            log.contains("the shop informs") && log.contains("redis-rs errs"),
            "{log}"
        );
        assert!(!log.contains("warns") && !log.contains("debugs"), "{log}");
        assert!(!log.contains("hunter2"), "{log}");
        assert!(!log.contains("skipping"), "no PostgreSQL notice: {log}");
        // A setting that is no filter: the default.
        let log = logged!(Some("no such=level=at all"));
        assert!(
            log.contains("the shop informs") && !log.contains("warns"),
            "{log}"
        );
    }

    #[test]
    fn shop_log_says_what_is_logged_but_never_a_connect_parameter() {
        let log = logged!(Some("info"));
        assert!(log.contains("async_connection warns"), "{log}");
        assert!(log.contains("already exists, skipping"), "{log}");
        assert!(!log.contains("debugs"), "{log}");
        let log = logged!(Some("debug"));
        assert!(
            log.contains("the shop debugs") && log.contains("warns"),
            "{log}"
        );
        assert!(!log.contains("hunter2"), "{log}");
    }
}
