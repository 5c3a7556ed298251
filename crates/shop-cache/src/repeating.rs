//! Something that goes on happening while a store is away (a daemon's step
//! failing, the cluster connection replaced or not rebuilt, the database
//! refusing the health check's write), for the log: a warning as it begins,
//! then at most one per [`REMINDER`] with how many times it happened, and,
//! where the caller sees it end, one line then; not a warning at every try.

use std::time::{Duration, Instant};

/// The least time between two warnings of one [`Repeating`].
pub const REMINDER: Duration = Duration::from_secs(60);

/// A run of the same event. Warnings are a [`REMINDER`] apart across runs
/// too, so events that come and go by turns (one node of several gone, a
/// step that fails every other time) do not warn at every turn.
#[derive(Debug, Default)]
pub struct Repeating {
    /// When the run began, none between runs.
    since: Option<Instant>,
    /// Events in the run.
    count: u64,
    /// Whether this run was warned of.
    warned: bool,
    /// When the last warning was given, in any run.
    last_warning: Option<Instant>,
}

impl Repeating {
    /// Counts one more event; true when it is to be warned of: at most one per
    /// [`REMINDER`].
    pub fn again(&mut self, now: Instant) -> bool {
        self.count += 1;
        self.since.get_or_insert(now);
        let due = self
            .last_warning
            .is_none_or(|last| now.duration_since(last) >= REMINDER);
        if due {
            self.last_warning = Some(now);
            self.warned = true;
        }
        due
    }

    /// Events in the run so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Ends the run: how many events and for how long, if it was warned of
    /// (else it passes as quietly as it went).
    pub fn ended(&mut self, now: Instant) -> Option<(u64, Duration)> {
        let began = self.since.take()?;
        let count = std::mem::take(&mut self.count);
        std::mem::take(&mut self.warned).then(|| (count, now.duration_since(began)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_warned_of_once_a_minute_and_its_end_once() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut run = Repeating::default();
        assert_eq!(run.ended(at(0)), None, "no run, nothing to say");
        let warned: Vec<u64> = (0..=130).filter(|&s| run.again(at(s))).collect();
        assert_eq!(warned, [0, 60, 120]);
        assert_eq!(run.count(), 131);
        assert_eq!(run.ended(at(131)), Some((131, Duration::from_secs(131))));
        assert_eq!(run.ended(at(132)), None, "said once");
        // Coming and going by turns: a warning a minute at most, and only a
        // warned run's end is said.
        assert!(!run.again(at(133)), "within a minute of the last warning");
        assert_eq!(run.ended(at(134)), None);
        assert!(run.again(at(180)));
        assert!(!run.again(at(181)));
        assert_eq!(run.ended(at(190)), Some((2, Duration::from_secs(10))));
    }
}
