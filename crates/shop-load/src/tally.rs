//! What the load's workers measure: latency (over the run, per second, per part
//! of a page view), statuses, connection failures; added up into the report.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

/// One second of a tally.
pub(crate) struct Slot {
    /// Latency of the requests due in that second and answered.
    pub(crate) latency: Histogram<u64>,
    /// Requests due in that second that got no answer: see [`Tally::connection_failures`].
    pub(crate) connection_failures: u64,
}

impl Slot {
    fn new() -> Self {
        Self {
            latency: new_histogram(),
            connection_failures: 0,
        }
    }
}

/// What one worker measured.
pub(crate) struct Tally {
    /// Latency of the answered requests.
    pub(crate) latency: Histogram<u64>,
    /// Per second since the start.
    pub(crate) timeline: Vec<Slot>,
    /// Answered requests per HTTP status (HTTP errors are the 4xx and 5xx here).
    pub(crate) statuses: BTreeMap<u16, u64>,
    /// Page views whose every part was answered.
    pub(crate) page_views: u64,
    /// Latency of each part of a page view (each request timed by itself).
    pub(crate) parts: BTreeMap<Part, Histogram<u64>>,
    /// Requests that got no answer because no connection could be opened, or the
    /// connection broke before the answer. Not latencies: a refused connect takes
    /// microseconds and would flatter the percentiles.
    pub(crate) connection_failures: u64,
}

/// One request of a page view, as a browser makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Part {
    /// The page's HTML.
    Html,
    /// The per-user call every page's script makes (`/api/me`).
    Me,
    /// An item page's insights (`/api/items/{id}/insights`).
    Insights,
}

impl Part {
    /// Its name in the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Part::Html => "html",
            Part::Me => "me",
            Part::Insights => "insights",
        }
    }
}

impl Tally {
    pub(crate) fn new() -> Self {
        Self {
            latency: new_histogram(),
            timeline: Vec::new(),
            statuses: BTreeMap::new(),
            page_views: 0,
            parts: BTreeMap::new(),
            connection_failures: 0,
        }
    }

    fn slot(&mut self, second: usize) -> &mut Slot {
        while self.timeline.len() <= second {
            self.timeline.push(Slot::new());
        }
        &mut self.timeline[second]
    }

    /// An answered request.
    pub(crate) fn answered(&mut self, second: usize, micros: u64, status: u16) {
        let micros = micros.max(1);
        let _ = self.latency.record(micros);
        let _ = self.slot(second).latency.record(micros);
        *self.statuses.entry(status).or_default() += 1;
    }

    /// A part of a page view answered in `micros` (timed from when it was sent).
    pub(crate) fn part(&mut self, part: Part, micros: u64) {
        let _ = self
            .parts
            .entry(part)
            .or_insert_with(new_histogram)
            .record(micros.max(1));
    }

    /// A request lost to a connection failure.
    pub(crate) fn connection_failed(&mut self, second: usize) {
        self.connection_failures += 1;
        self.slot(second).connection_failures += 1;
    }

    /// Adds another worker's tally.
    pub(crate) fn add(&mut self, other: Tally) {
        self.latency.add(&other.latency).ok();
        for (i, slot) in other.timeline.into_iter().enumerate() {
            let mine = self.slot(i);
            mine.latency.add(&slot.latency).ok();
            mine.connection_failures += slot.connection_failures;
        }
        for (s, n) in other.statuses {
            *self.statuses.entry(s).or_default() += n;
        }
        self.connection_failures += other.connection_failures;
        self.page_views += other.page_views;
        for (part, h) in other.parts {
            self.parts
                .entry(part)
                .or_insert_with(new_histogram)
                .add(&h)
                .ok();
        }
    }
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    // 1 us .. 60 s at 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}
