//! The process's stop signal: SIGINT (Ctrl-C) or SIGTERM (service managers).

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Listens for the stop signals from the moment it is called, and returns what
/// resolves when one arrives. Called before the process says it is ready, so a
/// stop sent right after that is a graceful stop, never the default action (an
/// abrupt exit).
pub fn listen() -> impl Future<Output = ()> + Send + 'static {
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        let (mut interrupt, mut terminate) = match (interrupt, terminate) {
            (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
            (Err(error), _) | (_, Err(error)) => {
                tracing::error!(%error, "cannot listen for SIGINT and SIGTERM");
                return std::future::pending().await;
            }
        };
        tokio::select! {
            _ = interrupt.recv() => {},
            _ = terminate.recv() => {},
        }
    }
}
