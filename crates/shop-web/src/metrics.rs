//! `GET /metrics` in the Prometheus text format, and the counters behind it.
//!
//! Request counts and latency histograms by route and status; page-cache hits,
//! misses, bypasses and errors; flash-sale outcomes; session-store failures met by
//! the session layer. Two gauges are read when scraped: the number of sessions
//! (`recent:`) and the row cache's lag (how overdue its most overdue row is). The
//! session cleaner's removals and the flash-sale reconciler's settlements,
//! corrections and reloads are counted where those daemons run.
//!
//! The per-request figures (a counter and a latency histogram by route and status,
//! and the flash sale's outcomes) go through the `metrics` crate into `metrics-exporter-prometheus`'s recorder:
//! one recorder per [`Metrics`], used with `metrics::with_local_recorder`, not the
//! process-global one, so two applications in one process (the tests run dozens)
//! count apart. Each route and status's handles are looked up once and kept (a
//! read lock and atomics per request after that; the hand-written map this replaced
//! took one mutex per request): asking the recorder for the handles on every
//! request cost a tenth of the cached-view throughput (BENCHMARKS.md, "Metrics
//! through the metrics crate"). The running totals for the operations page are
//! atomics beside it.
//! The other figures stay hand-written on purpose: they are counters other
//! components already keep (the page-cache layers', the daemons', the Redis
//! handle's), read when scraped, and copying them into a recorder would only make a
//! second place for each fact.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use shop_cache::flash_sale::ReconcilerTotals;

use crate::AppState;
use crate::answered::{Finish, Finished, Start};
use crate::page_cache::PageCacheStats;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// The per-request histogram's name.
const DURATION: &str = "shop_http_request_duration_seconds";

/// One route and status's request counter and latency histogram.
type RouteHandles = (::metrics::Counter, ::metrics::Histogram);

/// Every counter the shop exposes. One per process, shared through [`AppState`].
pub struct Metrics {
    /// Requests by route and status, and their latency histogram (see the module
    /// docs).
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// The recorder's handles by route and status, looked up by `&str` so a request
    /// allocates nothing once its route has been seen.
    handles: RwLock<HashMap<String, HashMap<u16, RouteHandles>>>,
    /// Requests answered, and how many within each of [`BUCKETS`], for [`Totals`].
    requests: AtomicU64,
    within: [AtomicU64; BUCKETS.len()],
    page_caches: Mutex<Vec<(&'static str, Arc<PageCacheStats>)>>,
    /// Requests the session layer served as guests because Redis failed.
    pub session_errors: Arc<AtomicU64>,
    /// Orders whose insights could not be recorded (the orders stand).
    pub insight_errors: AtomicU64,
    /// Requests refused because their address spent its uncached-work budget.
    pub uncached_refused: AtomicU64,
    cleaner_removed: Mutex<Option<Arc<AtomicU64>>>,
    reconciled: Mutex<Option<Arc<ReconcilerTotals>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(DURATION.to_owned()), &BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        Self {
            handle: recorder.handle(),
            recorder,
            handles: RwLock::default(),
            requests: AtomicU64::new(0),
            within: Default::default(),
            page_caches: Mutex::default(),
            session_errors: Arc::default(),
            insight_errors: AtomicU64::new(0),
            uncached_refused: AtomicU64::new(0),
            cleaner_removed: Mutex::default(),
            reconciled: Mutex::default(),
        }
    }
}

impl Metrics {
    /// Reports a page-cache layer's counters under `page` (`item`, `flash`).
    pub fn register_page_cache(&self, page: &'static str, stats: Arc<PageCacheStats>) {
        lock(&self.page_caches).push((page, stats));
    }

    /// Reports the in-process flash-sale reconciler's running totals.
    pub fn register_reconciler(&self, totals: Arc<ReconcilerTotals>) {
        *lock(&self.reconciled) = Some(totals);
    }

    /// Reports the in-process session cleaner's removal count.
    pub fn register_cleaner(&self, removed: Arc<AtomicU64>) {
        *lock(&self.cleaner_removed) = Some(removed);
    }

    /// Counts one flash-sale outcome.
    pub fn flash_outcome(&self, outcome: &'static str) {
        ::metrics::with_local_recorder(&self.recorder, || {
            ::metrics::counter!("shop_flash_outcomes_total", "outcome" => outcome).increment(1);
        });
    }

    /// Moves the latency samples recorded since the last call into the histograms.
    /// The recorder keeps each sample until then (8 bytes a request), and only a
    /// scrape would drain them otherwise: a shop nobody scrapes would grow without
    /// end. Called every second by [`crate::ops::TrafficSampler`].
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    fn observe(&self, route: &str, status: u16, seconds: f64) {
        {
            let known = self.handles.read().unwrap_or_else(|e| e.into_inner());
            if let Some((count, time)) = known.get(route).and_then(|s| s.get(&status)) {
                count.increment(1);
                time.record(seconds);
                drop(known);
                return self.total(seconds);
            }
        }
        let labels = [("route", route.to_owned()), ("status", status.to_string())];
        let (count, time) = ::metrics::with_local_recorder(&self.recorder, || {
            (
                ::metrics::counter!("shop_http_requests_total", &labels),
                ::metrics::histogram!(DURATION, &labels),
            )
        });
        count.increment(1);
        time.record(seconds);
        self.handles
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(route.to_owned())
            .or_default()
            .insert(status, (count, time));
        self.total(seconds);
    }

    fn total(&self, seconds: f64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        for (le, n) in BUCKETS.iter().zip(&self.within) {
            if seconds <= *le {
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The text exposition of everything counted, plus the gauges given.
    pub fn render(&self, sessions: Option<u64>, row_lag_seconds: Option<f64>) -> String {
        let mut out = self.handle.render();
        out.push_str("# TYPE shop_page_cache_total counter\n");
        for (page, stats) in lock(&self.page_caches).iter() {
            for (result, counter) in [
                ("hit", &stats.hits),
                ("stale", &stats.stale),
                ("miss", &stats.misses),
                ("bypass", &stats.bypasses),
                ("error", &stats.errors),
            ] {
                let _ = writeln!(
                    out,
                    "shop_page_cache_total{{page=\"{page}\",result=\"{result}\"}} {}",
                    counter.load(Ordering::Relaxed)
                );
            }
        }
        out.push_str("# TYPE shop_insight_errors_total counter\n");
        let _ = writeln!(
            out,
            "shop_insight_errors_total {}",
            self.insight_errors.load(Ordering::Relaxed)
        );
        out.push_str("# TYPE shop_session_errors_total counter\n");
        let _ = writeln!(
            out,
            "shop_session_errors_total {}",
            self.session_errors.load(Ordering::Relaxed)
        );
        out.push_str("# TYPE shop_uncached_refused_total counter\n");
        let _ = writeln!(
            out,
            "shop_uncached_refused_total {}",
            self.uncached_refused.load(Ordering::Relaxed)
        );
        if let Some(removed) = lock(&self.cleaner_removed).as_ref() {
            out.push_str("# TYPE shop_cleaner_removed_total counter\n");
            let _ = writeln!(
                out,
                "shop_cleaner_removed_total {}",
                removed.load(Ordering::Relaxed)
            );
        }
        if let Some(r) = lock(&self.reconciled).as_ref() {
            out.push_str("# TYPE shop_flash_reconciled_total counter\n");
            for (what, n) in [
                ("confirmed", &r.confirmed),
                ("released", &r.released),
                ("corrected", &r.corrected),
                ("reloaded", &r.reloaded),
            ] {
                let _ = writeln!(
                    out,
                    "shop_flash_reconciled_total{{what=\"{what}\"}} {}",
                    n.load(Ordering::Relaxed)
                );
            }
        }
        if let Some(n) = sessions {
            out.push_str("# TYPE shop_sessions gauge\n");
            let _ = writeln!(out, "shop_sessions {n}");
        }
        if let Some(lag) = row_lag_seconds {
            out.push_str("# TYPE shop_row_refresh_lag_seconds gauge\n");
            let _ = writeln!(out, "shop_row_refresh_lag_seconds {lag}");
        }
        out
    }
}

/// Running totals over every route and page cache, for the operations page's
/// plots (which take differences between two of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Requests answered.
    pub requests: u64,
    /// Of those, how many took at most each of [`Totals::BOUNDS`] (cumulative, as
    /// Prometheus counts them).
    pub buckets: [u64; BUCKETS.len()],
    /// Page-cache hits, all layers.
    pub hits: u64,
    /// Page-cache misses, all layers.
    pub misses: u64,
}

impl Totals {
    /// The latency buckets' upper bounds, in seconds.
    pub const BOUNDS: [f64; BUCKETS.len()] = BUCKETS;
}

impl Metrics {
    /// The running totals now.
    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            requests: self.requests.load(Ordering::Relaxed),
            ..Totals::default()
        };
        for (sum, n) in t.buckets.iter_mut().zip(&self.within) {
            *sum = n.load(Ordering::Relaxed);
        }
        for (_, stats) in lock(&self.page_caches).iter() {
            t.hits += stats.hits.load(Ordering::Relaxed);
            t.misses += stats.misses.load(Ordering::Relaxed);
        }
        t
    }

    /// Sessions the in-process cleaner removed, if it runs in this process.
    pub fn cleaner_removed(&self) -> Option<u64> {
        lock(&self.cleaner_removed)
            .as_ref()
            .map(|n| n.load(Ordering::Relaxed))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Metrics {
    /// Counts `resp`, answered to a request of `route` that started at `started`.
    fn observe_answer(&self, route: Option<&MatchedPath>, resp: &Response, started: Instant) {
        let route = route.map_or("unmatched", MatchedPath::as_str);
        self.observe(
            route,
            resp.status().as_u16(),
            started.elapsed().as_secs_f64(),
        );
    }
}

/// The layer (mount it with `route_layer`) timing every routed request, by its
/// route: a request goes to the service below as it is, with no per-request
/// box, clone of the service below or of the whole [`AppState`], as a
/// `from_fn_with_state` middleware makes.
#[derive(Clone)]
pub struct TimedLayer(pub Arc<Metrics>);

impl Start for TimedLayer {
    type Finish = Observation;

    fn start(&self, req: &mut Request) -> Observation {
        // MatchedPath is a shared string: cloning it does not allocate.
        Observation {
            route: req.extensions().get::<MatchedPath>().cloned(),
            started: Instant::now(),
            metrics: self.0.clone(),
        }
    }
}

impl<S> tower::Layer<S> for TimedLayer {
    type Service = Finished<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        Finished::new(inner, self.clone())
    }
}

/// A request [`TimedLayer`] counts when it is answered.
pub struct Observation {
    route: Option<MatchedPath>,
    started: Instant,
    metrics: Arc<Metrics>,
}

impl Finish for Observation {
    fn finish(self, mut resp: Response) -> Response {
        self.metrics
            .observe_answer(self.route.as_ref(), &resp, self.started);
        resp.extensions_mut().insert(Counted);
        resp
    }
}

/// Left on an answer a route's [`TimedLayer`] counted, so that
/// [`UncountedLayer`] does not count it again.
#[derive(Debug, Clone, Copy)]
struct Counted;

/// What [`UncountedLayer`] counts answers under: those no route counted.
pub const UNROUTED: &str = "unrouted";

/// The layer (in [`crate::http_limits::harden_counted`]'s stack, outside its
/// limits) counting every answer no route's [`TimedLayer`] counted, under the
/// route [`UNROUTED`]: the limits' own answers (a request timed out, a body
/// that stopped arriving, one too large by its `Content-Length`), a refused
/// cross-site form, a path no route serves. Without it a flood of any of
/// these would not show in `shop_http_requests_total` at all.
#[derive(Clone)]
pub struct UncountedLayer(pub Arc<Metrics>);

impl Start for UncountedLayer {
    type Finish = Uncounted;

    fn start(&self, _req: &mut Request) -> Uncounted {
        Uncounted {
            started: Instant::now(),
            metrics: self.0.clone(),
        }
    }
}

impl<S> tower::Layer<S> for UncountedLayer {
    type Service = Finished<S, Self>;

    fn layer(&self, inner: S) -> Self::Service {
        Finished::new(inner, self.clone())
    }
}

/// A request [`UncountedLayer`] counts when it is answered, unless a route did.
pub struct Uncounted {
    started: Instant,
    metrics: Arc<Metrics>,
}

impl Finish for Uncounted {
    fn finish(self, mut resp: Response) -> Response {
        if resp.extensions_mut().remove::<Counted>().is_none() {
            self.metrics.observe(
                UNROUTED,
                resp.status().as_u16(),
                self.started.elapsed().as_secs_f64(),
            );
        }
        resp
    }
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let sessions = state.sessions.count().await.ok();
    let lag = state.rows.lag().await.ok().flatten();
    let mut out = state.metrics.render(sessions, lag);
    // The Redis handle's circuit breaker (see shop_cache::connection).
    let redis = &state.redis;
    let _ = writeln!(
        out,
        "# TYPE shop_redis_failing_fast gauge\nshop_redis_failing_fast {}\n\
         # TYPE shop_redis_breaker_trips_total counter\nshop_redis_breaker_trips_total {}\n\
         # TYPE shop_redis_fast_failures_total counter\nshop_redis_fast_failures_total {}\n\
         # TYPE shop_redis_cluster_rebuilds_total counter\nshop_redis_cluster_rebuilds_total {}",
        u8::from(redis.is_failing_fast()),
        redis.trips(),
        redis.fast_failures(),
        redis.cluster_rebuilds(),
    );
    // The database's read connections used (see shop_db::Db::reads).
    let _ = writeln!(
        out,
        "# TYPE shop_db_reads_total counter\nshop_db_reads_total {}",
        state.db.reads()
    );
    // The in-process page tier (see page_cache::tier) and the held-back touches.
    if let Some(tier) = &state.tier {
        let stats = tier.stats();
        let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# TYPE shop_page_tier_total counter\n\
             shop_page_tier_total{{result=\"hit\"}} {}\n\
             shop_page_tier_total{{result=\"fallback\"}} {}\n\
             shop_page_tier_total{{result=\"fill\"}} {}\n\
             shop_page_tier_total{{result=\"refused\"}} {}\n\
             shop_page_tier_total{{result=\"event\"}} {}\n\
             shop_page_tier_total{{result=\"emptied\"}} {}\n\
             # TYPE shop_page_tier_subscribed gauge\nshop_page_tier_subscribed {}\n\
             # TYPE shop_page_tier_bytes gauge\nshop_page_tier_bytes {}",
            count(&stats.hits),
            count(&stats.fallbacks),
            count(&stats.fills),
            count(&stats.refused),
            count(&stats.events),
            count(&stats.emptied),
            u8::from(tier.is_trusted()),
            tier.bytes(),
        );
    }
    let _ = writeln!(
        out,
        "# TYPE shop_touches_held gauge\nshop_touches_held {}\n\
         # TYPE shop_redis_commands_sent_total counter\n\
         shop_redis_commands_sent_total {}",
        state.sessions.pending_touches(),
        redis.commands_sent() + state.pages.cache_commands_sent(),
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_instance_counts_its_own_requests() {
        let (a, b) = (Metrics::default(), Metrics::default());
        a.observe("/x", 200, 0.0008);
        a.observe("/x", 200, 0.2);
        b.observe("/x", 404, 0.0001);
        let text = a.render(None, None);
        assert!(
            text.contains("shop_http_requests_total{route=\"/x\",status=\"200\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "shop_http_request_duration_seconds_bucket{route=\"/x\",status=\"200\",le=\"0.001\"} 1"
            ),
            "{text}"
        );
        assert!(!text.contains("404"), "another instance's request: {text}");
        let totals = a.totals();
        assert_eq!(totals.requests, 2);
        assert_eq!(totals.buckets[0], 0, "none within 0.5 ms");
        assert_eq!(totals.buckets[1], 1, "one within 1 ms");
        assert_eq!(totals.buckets[BUCKETS.len() - 1], 2, "both within 2.5 s");
        assert_eq!(b.totals().requests, 1);
    }

    #[test]
    fn upkeep_keeps_every_sample() {
        let m = Metrics::default();
        m.observe("/y", 200, 0.0004);
        m.upkeep();
        m.observe("/y", 200, 0.0004);
        m.upkeep();
        let text = m.render(None, None);
        assert!(
            text.contains(
                "shop_http_request_duration_seconds_bucket{route=\"/y\",status=\"200\",le=\"0.0005\"} 2"
            ),
            "{text}"
        );
    }

    #[test]
    fn flash_outcomes_are_counted_by_outcome() {
        let m = Metrics::default();
        m.flash_outcome("won");
        m.flash_outcome("won");
        m.flash_outcome("sold_out");
        let text = m.render(None, None);
        assert!(
            text.contains("shop_flash_outcomes_total{outcome=\"won\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("shop_flash_outcomes_total{outcome=\"sold_out\"} 1"),
            "{text}"
        );
    }
}
