//! The error type of the Redis layer.
//!
//! Callers (the web tier, the daemons) match on it: [`CacheError::Invalid`] is the
//! caller's fault and maps to a 4xx, [`CacheError::Redis`] means Redis is unavailable
//! or misbehaving and maps to a 503 or a retry. Messages never contain a session
//! token or a key built from one.

use crate::domain::InvalidInput;

/// Everything that can go wrong in the Redis layer.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The input was rejected before anything was sent to Redis.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// Redis could not be reached, timed out, or answered with an error.
    #[error("redis: {0}")]
    Redis(redis::RedisError),
    /// The command never reached Redis: it was already known to be down (the
    /// connection's circuit breaker is open). Log these at debug level: the outage
    /// itself was logged once when it began.
    #[error("redis: {0}")]
    FailingFast(FailingFast),
    /// A store this layer consults on the side (the database behind the row cache or
    /// the flash-sale reconciler) failed; the daemon retries.
    #[error("{what}: {source}")]
    Source {
        /// Which store, for the log.
        what: &'static str,
        /// Its error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Redis held a value this code cannot have written (a foreign writer or a bug).
    #[error("unexpected value in {what}")]
    Corrupt {
        /// Which structure held it, without the key (keys may contain tokens).
        what: &'static str,
    },
}

/// What a command the connection's breaker failed at once carries (inside the
/// `redis::RedisError` the connection must return); [`CacheError`] turns it into
/// [`CacheError::FailingFast`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("redis is unreachable; failing fast until the next probe")]
pub struct FailingFast;

impl FailingFast {
    /// The error the connection returns for a command it did not send.
    pub(crate) fn redis_error() -> redis::RedisError {
        redis::RedisError::from(std::io::Error::other(FailingFast))
    }

    /// Is `e` such an error?
    fn is(e: &redis::RedisError) -> bool {
        carries::<FailingFast>(e)
    }
}

/// Is `e` an I/O error made of a `T` (as the connection makes its own errors)?
/// redis-rs keeps the `io::Error` behind an `Arc`, which is what its `source()`
/// shows.
pub(crate) fn carries<T: std::error::Error + 'static>(e: &redis::RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let Some(source) = std::error::Error::source(e) else {
        return false;
    };
    let io = match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref::<std::io::Error>(),
        None => source.downcast_ref::<std::io::Error>(),
    };
    io.and_then(|io| io.get_ref())
        .is_some_and(|inner| inner.is::<T>())
}

impl From<redis::RedisError> for CacheError {
    fn from(e: redis::RedisError) -> Self {
        if FailingFast::is(&e) {
            CacheError::FailingFast(FailingFast)
        } else {
            CacheError::Redis(e)
        }
    }
}

impl CacheError {
    /// True when the error is Redis being unavailable rather than bad input,
    /// so callers can answer "try again" instead of "you sent something wrong".
    pub fn is_unavailable(&self) -> bool {
        matches!(self, CacheError::Redis(_) | CacheError::FailingFast(_))
    }

    /// True for [`CacheError::FailingFast`]: Redis is already known to be down and
    /// was already logged, so callers log these quietly (during an outage every
    /// request meets one).
    pub fn is_failing_fast(&self) -> bool {
        matches!(self, CacheError::FailingFast(_))
    }

    /// True when Redis did not answer: it could not be reached (a refused or
    /// dropped connection, an I/O error), did not answer in time (a missed
    /// budget, a time-out), or its node fails fast since: a node stalled or
    /// gone, not one that answered with an error (a refused password, a
    /// reply that does not parse). A Redis loading its data set after a
    /// restart (`LOADING`) counts as not answering: it serves nothing yet.
    pub fn is_unanswered(&self) -> bool {
        match self {
            CacheError::FailingFast(_) => true,
            CacheError::Redis(e) => {
                crate::connection::no_answer(e) || crate::connection::loading(e)
            }
            _ => false,
        }
    }
}
