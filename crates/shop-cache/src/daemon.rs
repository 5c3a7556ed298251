//! The loop every background daemon runs: call its single step, pause as the step
//! asks, stop promptly when the shutdown token is cancelled.
//!
//! A daemon's work lives in its `step()`, which tests call directly; this loop only
//! adds pacing, error logging and shutdown. A run of failed steps (Redis or the
//! database gone for a while) is logged as it begins, then once a minute, and
//! when a step succeeds again: not a warning a second from every daemon.
//!
//! A step interrupted by shutdown is dropped mid-way, so every step must be safe
//! to drop: each is one Redis script or command, which Redis runs entirely or not
//! at all; or steps that are each safe to do again (the cart takes: a script
//! that takes an order's lines once, a database transaction that rolls back
//! when dropped); or (the view flusher, whose write takes views from memory)
//! runs as a task of its own that outlives the dropped step and that the
//! daemon's `finish` waits for.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::repeating::Repeating;

/// How long a daemon waits after a failed step before trying again, so an outage
/// of Redis costs a try a second, not a busy loop.
pub const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// A background job made of repeated single steps.
pub trait Daemon: Send {
    /// A short name for logs.
    const NAME: &'static str;

    /// What a failed step reports (logged by [`run`], never ending the loop): the
    /// daemon's own error type, whatever layer it belongs to.
    type Error: std::fmt::Display + Send;

    /// Does one step of work and says how long to pause before the next
    /// (`Duration::ZERO` when there may be more to do right away).
    fn tick(&mut self) -> impl Future<Output = Result<Duration, Self::Error>> + Send;

    /// Runs once after shutdown was asked for, before the loop returns: a daemon
    /// holding work in memory writes it here. Nothing by default.
    fn finish(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Runs `daemon` until `shutdown` is cancelled. Errors are retried after
/// [`ERROR_BACKOFF`] and logged as a run (a warning as it begins, then one a
/// minute, and a line when it ends); they never end the loop.
pub async fn run<D: Daemon>(mut daemon: D, shutdown: CancellationToken) {
    tracing::info!(daemon = D::NAME, "started");
    let mut failing = Repeating::default();
    loop {
        let pause = tokio::select! {
            _ = shutdown.cancelled() => break,
            outcome = daemon.tick() => match outcome {
                Ok(pause) => {
                    if let Some((steps, lasted)) = failing.ended(Instant::now()) {
                        tracing::info!(
                            daemon = D::NAME,
                            failed_steps = steps,
                            failing_for_ms = lasted.as_millis() as u64,
                            "steps succeed again"
                        );
                    }
                    pause
                }
                Err(error) => {
                    if failing.again(Instant::now()) {
                        tracing::warn!(
                            daemon = D::NAME,
                            %error,
                            failed_steps = failing.count(),
                            "step failed (said again each minute it goes on failing)"
                        );
                    } else {
                        tracing::debug!(daemon = D::NAME, %error, "step failed");
                    }
                    ERROR_BACKOFF
                }
            },
        };
        if pause.is_zero() {
            // Let other tasks (and the shutdown signal) in between busy steps.
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    daemon.finish().await;
    tracing::info!(daemon = D::NAME, "stopped");
}
