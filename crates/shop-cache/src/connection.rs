//! Opening the one multiplexed, reconnecting Redis handle a process shares.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::CacheError;

/// How long one command may take before it fails with a timeout. Generous: the
/// cleaner's script over a large batch takes milliseconds, a page read microseconds.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one connection attempt may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Reconnection attempts per failure before an error is returned to the caller; the
/// next command starts a new round, so the handle recovers whenever Redis returns.
const RECONNECT_RETRIES: usize = 3;

/// Connects to `url` (`redis://host:port/db` or `unix:///path/to/socket`) with the
/// shop's timeouts. Fails if Redis does not answer now; later outages are survived.
pub async fn connect(url: &str) -> Result<ConnectionManager, CacheError> {
    connect_with(url, default_config()).await
}

/// [`connect`] with a caller's configuration (tests shorten the timeouts).
pub async fn connect_with(
    url: &str,
    config: ConnectionManagerConfig,
) -> Result<ConnectionManager, CacheError> {
    let client = redis::Client::open(url)?;
    Ok(ConnectionManager::new_with_config(client, config).await?)
}

fn default_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
        .set_max_delay(Duration::from_millis(500))
}
