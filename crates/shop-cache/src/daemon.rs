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
//! at all, or (the view flusher, whose write takes views from memory) runs as a
//! task of its own that outlives the dropped step and that the daemon's `finish`
//! waits for.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// How long a daemon waits after a failed step before trying again, so an outage
/// of Redis costs a try a second, not a busy loop.
pub const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// How often a daemon whose steps keep failing warns again (with how many
/// failed); the failures in between are logged at `debug`.
pub const FAILING_REMINDER: Duration = Duration::from_secs(60);

/// A run of failed steps, for the log: whether a failure is worth a warning,
/// and what to say when a step succeeds again. Warnings are a
/// [`FAILING_REMINDER`] apart across runs too, so steps that fail and succeed
/// by turns (one node of several gone) do not warn at every turn.
#[derive(Debug, Default)]
struct Failing {
    /// When the run began, none while steps succeed.
    since: Option<Instant>,
    /// Failed steps in the run.
    steps: u64,
    /// Whether this run was warned of.
    warned: bool,
    /// When the last warning was given, in any run.
    last_warning: Option<Instant>,
}

impl Failing {
    /// Counts a failed step; true when it is to be warned of: at most one per
    /// [`FAILING_REMINDER`].
    fn failed(&mut self, now: Instant) -> bool {
        self.steps += 1;
        self.since.get_or_insert(now);
        let due = self
            .last_warning
            .is_none_or(|last| now.duration_since(last) >= FAILING_REMINDER);
        if due {
            self.last_warning = Some(now);
            self.warned = true;
        }
        due
    }

    /// Ends the run: how many steps failed and for how long, if it was
    /// warned of (else it passes as quietly as it went).
    fn succeeded(&mut self, now: Instant) -> Option<(u64, Duration)> {
        let began = self.since.take()?;
        let steps = std::mem::take(&mut self.steps);
        std::mem::take(&mut self.warned).then(|| (steps, now.duration_since(began)))
    }
}

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
/// [`ERROR_BACKOFF`] and logged as a run ([`FAILING_REMINDER`]); they never end
/// the loop.
pub async fn run<D: Daemon>(mut daemon: D, shutdown: CancellationToken) {
    tracing::info!(daemon = D::NAME, "started");
    let mut failing = Failing::default();
    loop {
        let pause = tokio::select! {
            _ = shutdown.cancelled() => break,
            outcome = daemon.tick() => match outcome {
                Ok(pause) => {
                    if let Some((steps, lasted)) = failing.succeeded(Instant::now()) {
                        tracing::info!(
                            daemon = D::NAME,
                            failed_steps = steps,
                            failing_for_ms = lasted.as_millis() as u64,
                            "steps succeed again"
                        );
                    }
                    pause
                }
                Err(error) if failing.failed(Instant::now()) => {
                    tracing::warn!(
                        daemon = D::NAME,
                        %error,
                        failed_steps = failing.steps,
                        "step failed (said again each minute it goes on failing)"
                    );
                    ERROR_BACKOFF
                }
                Err(error) => {
                    tracing::debug!(daemon = D::NAME, %error, "step failed");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_is_warned_of_once_a_minute_and_its_end_once() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut failing = Failing::default();
        assert_eq!(failing.succeeded(at(0)), None, "no run, nothing to say");
        let warned: Vec<u64> = (0..=130).filter(|&s| failing.failed(at(s))).collect();
        assert_eq!(warned, [0, 60, 120]);
        assert_eq!(
            failing.succeeded(at(131)),
            Some((131, Duration::from_secs(131)))
        );
        assert_eq!(failing.succeeded(at(132)), None, "said once");
        // Failing and succeeding by turns: a warning a minute at most, and
        // only a warned run's end is said.
        assert!(
            !failing.failed(at(133)),
            "within a minute of the last warning"
        );
        assert_eq!(failing.succeeded(at(134)), None);
        assert!(failing.failed(at(180)));
        assert!(!failing.failed(at(181)));
        assert_eq!(
            failing.succeeded(at(190)),
            Some((2, Duration::from_secs(10)))
        );
    }
}
