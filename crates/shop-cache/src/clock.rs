//! Wall-clock time in the units Redis scores use (unix seconds, fractional).

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in seconds with microsecond resolution, as the book's `time.time()`.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
