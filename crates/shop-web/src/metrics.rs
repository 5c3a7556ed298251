//! `GET /metrics` in the Prometheus text format, and the counters behind it.
//!
//! Request counts and latency histograms by route and status; page-cache hits,
//! misses, bypasses and errors; flash-sale outcomes; session-store failures met by
//! the session layer. Two gauges are read when scraped: the number of sessions
//! (`recent:`) and the row cache's lag (how overdue its most overdue row is). The
//! session cleaner's removals and the flash-sale reconciler's settlements,
//! corrections and reloads are counted where those daemons run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use shop_cache::flash_sale::ReconcilerTotals;

use crate::AppState;
use crate::page_cache::PageCacheStats;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
struct RouteStats {
    count: u64,
    sum: f64,
    buckets: [u64; BUCKETS.len()],
}

/// Every counter the shop exposes. One per process, shared through [`AppState`].
#[derive(Default)]
pub struct Metrics {
    /// route -> status -> stats; looked up by `&str`, so a request allocates nothing
    /// once its route has been seen.
    routes: Mutex<BTreeMap<String, BTreeMap<u16, RouteStats>>>,
    page_caches: Mutex<Vec<(&'static str, Arc<PageCacheStats>)>>,
    flash: Mutex<BTreeMap<&'static str, u64>>,
    /// Requests the session layer served as guests because Redis failed.
    pub session_errors: Arc<AtomicU64>,
    /// Orders whose insights could not be recorded (the orders stand).
    pub insight_errors: AtomicU64,
    cleaner_removed: Mutex<Option<Arc<AtomicU64>>>,
    reconciled: Mutex<Option<Arc<ReconcilerTotals>>>,
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
        *lock(&self.flash).entry(outcome).or_default() += 1;
    }

    fn observe(&self, route: &str, status: u16, seconds: f64) {
        let mut routes = lock(&self.routes);
        if !routes.contains_key(route) {
            routes.insert(route.to_owned(), BTreeMap::new());
        }
        let by_status = routes.get_mut(route).expect("inserted above");
        let stats = by_status.entry(status).or_default();
        stats.count += 1;
        stats.sum += seconds;
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                stats.buckets[i] += 1;
            }
        }
    }

    /// The text exposition of everything counted, plus the gauges given.
    pub fn render(&self, sessions: Option<u64>, row_lag_seconds: Option<f64>) -> String {
        let mut out = String::new();
        out.push_str("# TYPE shop_http_requests_total counter\n");
        out.push_str("# TYPE shop_http_request_duration_seconds histogram\n");
        let routes = lock(&self.routes);
        let all = routes.iter().flat_map(|(route, by_status)| {
            by_status.iter().map(move |(status, s)| (route, status, s))
        });
        for (route, status, s) in all {
            let labels = format!("route=\"{route}\",status=\"{status}\"");
            let _ = writeln!(out, "shop_http_requests_total{{{labels}}} {}", s.count);
            for (le, n) in BUCKETS.iter().zip(s.buckets) {
                let _ = writeln!(
                    out,
                    "shop_http_request_duration_seconds_bucket{{{labels},le=\"{le}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "shop_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                s.count
            );
            let _ = writeln!(
                out,
                "shop_http_request_duration_seconds_sum{{{labels}}} {}",
                s.sum
            );
            let _ = writeln!(
                out,
                "shop_http_request_duration_seconds_count{{{labels}}} {}",
                s.count
            );
        }
        out.push_str("# TYPE shop_page_cache_total counter\n");
        for (page, stats) in lock(&self.page_caches).iter() {
            for (result, counter) in [
                ("hit", &stats.hits),
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
        out.push_str("# TYPE shop_flash_outcomes_total counter\n");
        for (outcome, n) in lock(&self.flash).iter() {
            let _ = writeln!(
                out,
                "shop_flash_outcomes_total{{outcome=\"{outcome}\"}} {n}"
            );
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
        let mut t = Totals::default();
        for statuses in lock(&self.routes).values() {
            for s in statuses.values() {
                t.requests += s.count;
                for (sum, n) in t.buckets.iter_mut().zip(s.buckets) {
                    *sum += n;
                }
            }
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

/// Middleware (as a route layer) timing every routed request.
pub async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // MatchedPath is a shared string: cloning it does not allocate.
    let route = req.extensions().get::<MatchedPath>().cloned();
    let started = Instant::now();
    let resp = next.run(req).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    state.metrics.observe(
        route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
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
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
