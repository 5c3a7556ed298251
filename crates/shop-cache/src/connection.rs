//! The one Redis handle a process shares: a multiplexed, reconnecting
//! `ConnectionManager` behind a circuit breaker.
//!
//! Why the breaker: when Redis goes away, every command waits for the manager's
//! reconnection attempts and timeouts (a drill measured about 2 s per command, two
//! commands per item page, so 7,500 page views/s fell to about 40/s). The pages do
//! not need Redis to be served (the page cache and the session layer fall back to
//! the database and a guest session), so waiting for it is the whole cost. Once a
//! command fails because Redis is unreachable (I/O error, timeout, dropped
//! connection), the breaker opens: for [`BACKOFF`] every command fails at once with
//! an I/O error, without touching the network. Then one command is let through as a
//! probe (the others keep failing fast); its success closes the breaker, its failure
//! opens it for another back-off. Errors Redis answers with (a wrong type, a script
//! error) say nothing about reachability and leave the breaker alone. A command
//! that times out (2 s) counts as unreachable: a Redis stalled that long (a huge
//! script, a fork stall) is treated as down for a quarter second, which costs 503s
//! on writes for that long and spares every other request the same wait.
//!
//! Every clone of a [`RedisConn`] shares one breaker, so the session layer, the page
//! cache and the carts learn together that Redis is down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

use crate::CacheError;

/// How long one command may take before it fails with a timeout. Generous: the
/// cleaner's script over a large batch takes milliseconds, a page read microseconds.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one connection attempt may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Reconnection attempts per failure before an error is returned to the caller; the
/// next command starts a new round, so the handle recovers whenever Redis returns.
/// One: the breaker already spaces the attempts during an outage, and each retry
/// here is a wait the probing request makes its client sit through (three retries
/// measured about 0.9 s per probe in the Redis-outage drill).
const RECONNECT_RETRIES: usize = 1;
/// How long the breaker fails commands at once after Redis was found unreachable,
/// before one probe is let through. Short, so service is back well within a second
/// of Redis returning; long enough that an outage costs one probe per quarter second
/// instead of a timeout per request.
pub const BACKOFF: Duration = Duration::from_millis(250);

/// What a command failed fast with reads as this (see [`is_failing_fast`]).
const FAILING_FAST: &str = "redis is unreachable; failing fast until the next probe";

/// True for the error of a command the breaker failed at once: Redis is already
/// known to be down and was already logged, so callers log these quietly (during an
/// outage every request meets one).
pub fn is_failing_fast(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Io && e.to_string().contains(FAILING_FAST)
}

/// A cloneable Redis handle: one multiplexed connection per process, reconnecting,
/// failing fast while Redis is known to be unreachable (see the module docs).
#[derive(Clone)]
pub struct RedisConn {
    inner: ConnectionManager,
    breaker: Arc<Breaker>,
}

impl RedisConn {
    /// True while the breaker is open: Redis was found unreachable and commands fail
    /// at once (for `/healthz` and `/metrics`).
    pub fn is_failing_fast(&self) -> bool {
        self.breaker.open_until_ms.load(Ordering::Acquire) != 0
    }

    /// How many times the breaker opened since the process started.
    pub fn trips(&self) -> u64 {
        self.breaker.trips.load(Ordering::Relaxed)
    }

    /// How many commands failed at once because the breaker was open.
    pub fn fast_failures(&self) -> u64 {
        self.breaker.fast_failures.load(Ordering::Relaxed)
    }
}

/// Connects to `url` (`redis://host:port/db` or `unix:///path/to/socket`) with the
/// shop's timeouts. Fails if Redis does not answer now; later outages are survived.
pub async fn connect(url: &str) -> Result<RedisConn, CacheError> {
    connect_with(url, default_config()).await
}

/// [`connect`] with a caller's configuration (tests shorten the timeouts).
pub async fn connect_with(
    url: &str,
    config: ConnectionManagerConfig,
) -> Result<RedisConn, CacheError> {
    let client = redis::Client::open(url)?;
    let inner = ConnectionManager::new_with_config(client, config).await?;
    Ok(RedisConn {
        inner,
        breaker: Arc::new(Breaker::new(BACKOFF)),
    })
}

fn default_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
        .set_max_delay(Duration::from_millis(500))
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let admitted = self.breaker.admit()?;
            let result = self.inner.req_packed_command(cmd).await;
            admitted.record(result.as_ref().err());
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let admitted = self.breaker.admit()?;
            let result = self
                .inner
                .req_packed_commands(pipeline, offset, count)
                .await;
            admitted.record(result.as_ref().err());
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// The breaker's state, shared by every clone of a handle.
#[derive(Debug)]
struct Breaker {
    /// Milliseconds since `epoch` until which commands fail fast; 0 = closed.
    open_until_ms: AtomicU64,
    /// Bumped each time the breaker opens or closes. A command remembers the
    /// generation it was admitted in, so a late answer to a command sent before the
    /// last change cannot flip the state (a success from before an outage must not
    /// close the breaker in the middle of it; a timeout from before a recovery must
    /// not reopen it).
    generation: AtomicU64,
    /// A probe is in flight (only one at a time while open).
    probing: AtomicBool,
    epoch: Instant,
    backoff: Duration,
    trips: AtomicU64,
    fast_failures: AtomicU64,
}

/// A command let through. Only commands admitted while the breaker was closed, in
/// the current generation, may open it; only the probe may close it. Dropping the
/// probe (when its command finished, or when its caller gave up on it mid-way: a
/// client that went away, a request timeout) lets the next probe go, so a
/// cancelled probe cannot leave the breaker open for good.
#[derive(Debug)]
struct Admitted<'a> {
    breaker: &'a Breaker,
    generation: u64,
    probe: bool,
}

impl Admitted<'_> {
    /// Learns from the command's outcome.
    fn record(self, error: Option<&RedisError>) {
        let b = self.breaker;
        match error {
            Some(e) if unreachable(e) => {
                let until = b.now_ms() + b.backoff.as_millis() as u64;
                if self.probe {
                    b.open_until_ms.store(until, Ordering::Release);
                } else if b
                    .generation
                    .compare_exchange(
                        self.generation,
                        self.generation + 1,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    b.open_until_ms.store(until, Ordering::Release);
                    b.trips.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        error = %e,
                        "redis unreachable; failing fast, probing every {:?}",
                        b.backoff
                    );
                }
            }
            _ if self.probe => {
                b.open_until_ms.store(0, Ordering::Release);
                b.generation.fetch_add(1, Ordering::AcqRel);
                tracing::info!("redis answers again");
            }
            _ => {}
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.probe {
            self.breaker.probing.store(false, Ordering::Release);
        }
    }
}

impl Breaker {
    fn new(backoff: Duration) -> Self {
        Self {
            open_until_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            epoch: Instant::now(),
            backoff,
            trips: AtomicU64::new(0),
            fast_failures: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        // +1 so that "now" is never 0, the closed marker.
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Lets a command through, or fails it at once while the breaker is open.
    fn admit(&self) -> Result<Admitted<'_>, RedisError> {
        let generation = self.generation.load(Ordering::Acquire);
        let until = self.open_until_ms.load(Ordering::Acquire);
        if until == 0 {
            return Ok(Admitted {
                breaker: self,
                generation,
                probe: false,
            });
        }
        if self.now_ms() >= until
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Admitted {
                breaker: self,
                generation,
                probe: true,
            });
        }
        self.fast_failures.fetch_add(1, Ordering::Relaxed);
        Err(RedisError::from((ErrorKind::Io, FAILING_FAST)))
    }
}

/// Does this error mean Redis could not be reached (rather than that it answered
/// with an error)?
fn unreachable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error() -> RedisError {
        RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    /// A breaker whose back-off is long enough never to end during a test: the
    /// back-off's end is simulated with [`expire`].
    fn breaker() -> Breaker {
        Breaker::new(Duration::from_secs(600))
    }

    fn expire(b: &Breaker) {
        b.open_until_ms.store(1, Ordering::Release);
    }

    fn trip(b: &Breaker) {
        b.admit().unwrap().record(Some(&io_error()));
    }

    #[test]
    fn opens_on_unreachable_and_fails_fast_until_the_backoff_ends() {
        let b = breaker();
        trip(&b);
        let fast = b.admit().expect_err("open: fail fast");
        assert!(is_failing_fast(&fast));
        assert!(!is_failing_fast(&io_error()));
        assert_eq!(b.trips.load(Ordering::Relaxed), 1);
        expire(&b);
        let probe = b.admit().expect("a probe after the back-off");
        assert!(probe.probe);
        assert!(b.admit().is_err(), "one probe at a time");
        probe.record(None);
        assert!(b.admit().is_ok(), "closed after a good probe");
        assert_eq!(b.open_until_ms.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_failed_probe_opens_it_again() {
        let b = breaker();
        trip(&b);
        expire(&b);
        b.admit().unwrap().record(Some(&io_error()));
        assert!(b.admit().is_err());
        assert_eq!(b.trips.load(Ordering::Relaxed), 1, "still the same outage");
    }

    #[test]
    fn answers_that_are_errors_do_not_open_it() {
        let b = breaker();
        let wrong_type = RedisError::from((ErrorKind::UnexpectedReturnType, "x"));
        b.admit().unwrap().record(Some(&wrong_type));
        assert!(b.admit().is_ok());
    }

    #[test]
    fn a_probe_given_up_on_lets_the_next_one_go() {
        let b = breaker();
        trip(&b);
        expire(&b);
        let probe = b.admit().unwrap();
        // The caller's future is dropped mid-command: nothing is recorded.
        drop(probe);
        let next = b.admit().expect("another probe, not a breaker stuck open");
        assert!(next.probe);
    }

    #[test]
    fn late_answers_from_before_a_change_do_not_flip_it() {
        let b = breaker();
        let slow_success = b.admit().unwrap();
        let slow_failure = b.admit().unwrap();
        trip(&b);
        slow_success.record(None);
        assert!(b.admit().is_err(), "a success sent before the outage");
        expire(&b);
        b.admit().unwrap().record(None);
        assert!(b.admit().is_ok(), "closed by the probe");
        slow_failure.record(Some(&io_error()));
        assert!(b.admit().is_ok(), "a failure sent before the recovery");
        assert_eq!(b.trips.load(Ordering::Relaxed), 1);
    }
}
