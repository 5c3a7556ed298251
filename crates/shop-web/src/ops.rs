//! The operations page, `/ops`: what the Redis machinery is doing, for the
//! shop's admins (a user flag, set with `shop users grant-admin NAME`).
//!
//! Figures read when the page is asked for: live sessions, the page-cache hit
//! ratio since start, the 20 most viewed items, sessions cleaned by this
//! process's cleaner, the row cache's lag and the stock of every running sale.
//! Plots of the last [`HISTORY`] seconds: requests per second, p99 latency, and
//! page-cache hits against misses per second, drawn here as inline SVG (no
//! script, no chart library, nothing fetched from elsewhere: the page works
//! offline). The page reloads itself every few seconds.
//!
//! The plots' data comes from [`TrafficSampler`], a daemon that takes this
//! process's running totals ([`Metrics::totals`]) once a second and keeps the
//! differences in a [`Traffic`] ring. So the figures are this web server's, not
//! the fleet's: a fleet has Prometheus scraping `/metrics` for that. p99 is read
//! from the latency histogram, so it is the upper bound of the bucket the 99th
//! percentile fell in.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use shop_cache::daemon::Daemon;

use crate::AppState;
use crate::error::WebError;
use crate::metrics::{Metrics, Totals};
use crate::request::admins_only;
use crate::session::Session;
use crate::templates::{self, OpsPage, OpsSale, OpsTop};

/// Seconds of history the plots show.
pub const HISTORY: usize = 300;
/// How often the sampler takes the totals.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// One second of traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Requests answered per second.
    pub requests: f64,
    /// The 99th percentile latency, in milliseconds (a histogram bucket's bound);
    /// 0 when no request was answered.
    pub p99_ms: f64,
    /// Page-cache hits per second.
    pub hits: f64,
    /// Page-cache misses per second.
    pub misses: f64,
}

/// The last [`HISTORY`] samples, oldest first. Shared by the sampler and the page.
#[derive(Debug, Default)]
pub struct Traffic(Mutex<VecDeque<Sample>>);

impl Traffic {
    fn push(&self, sample: Sample) {
        let mut ring = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == HISTORY {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        let ring = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter().copied().collect()
    }
}

/// Takes the running totals every [`SAMPLE_EVERY`] and records the difference.
pub struct TrafficSampler {
    metrics: Arc<Metrics>,
    traffic: Arc<Traffic>,
    last: Option<(Instant, Totals)>,
}

impl TrafficSampler {
    /// A sampler of `metrics` into `traffic`.
    pub fn new(metrics: Arc<Metrics>, traffic: Arc<Traffic>) -> Self {
        Self {
            metrics,
            traffic,
            last: None,
        }
    }

    /// One sample: the totals now against the last step's (the first step only
    /// takes the totals). Also the metrics recorder's upkeep (see
    /// [`Metrics::upkeep`]): this is the process's once-a-second metrics daemon.
    pub fn step(&mut self) {
        self.metrics.upkeep();
        let now = Instant::now();
        let totals = self.metrics.totals();
        if let Some((then, before)) = self.last {
            let secs = now.duration_since(then).as_secs_f64().max(1e-3);
            self.traffic.push(sample(&before, &totals, secs));
        }
        self.last = Some((now, totals));
    }
}

impl Daemon for TrafficSampler {
    const NAME: &'static str = "traffic-sampler";
    type Error = std::convert::Infallible;

    async fn tick(&mut self) -> Result<Duration, Self::Error> {
        self.step();
        Ok(SAMPLE_EVERY)
    }
}

/// The traffic between two totals `secs` apart.
fn sample(before: &Totals, after: &Totals, secs: f64) -> Sample {
    let requests = after.requests.saturating_sub(before.requests);
    let wanted = (requests as f64 * 0.99).ceil() as u64;
    let p99 = Totals::BOUNDS
        .iter()
        .zip(after.buckets.iter().zip(before.buckets))
        .find(|(_, (a, b))| a.saturating_sub(*b) >= wanted)
        .map_or_else(
            || Totals::BOUNDS[Totals::BOUNDS.len() - 1],
            |(bound, _)| *bound,
        );
    Sample {
        requests: requests as f64 / secs,
        p99_ms: if requests == 0 { 0.0 } else { p99 * 1_000.0 },
        hits: after.hits.saturating_sub(before.hits) as f64 / secs,
        misses: after.misses.saturating_sub(before.misses) as f64 / secs,
    }
}

/// The operations route.
pub fn router(state: AppState) -> Router {
    Router::new().route("/ops", get(ops)).with_state(state)
}

async fn ops(
    State(state): State<AppState>,
    session: Session,
    headers: axum::http::HeaderMap,
) -> Result<Response, WebError> {
    if let Err(answer) = admins_only(&state, &session, &headers, "/ops").await {
        return Ok(answer);
    }
    // Each figure on its own: one that cannot be read shows as unknown.
    let sessions = state.sessions.count().await.ok();
    let lag = state.rows.lag().await.ok().flatten();
    let top = state.analytics.top(20).await.unwrap_or_default();
    let ids: Vec<_> = top.iter().map(|(id, _)| *id).collect();
    let items = state.db.items_by_id(&ids).await?;
    let top = top
        .iter()
        .map(|(id, score)| OpsTop {
            id: id.get(),
            title: items
                .get(id)
                .map_or_else(String::new, |it| it.title.clone()),
            score: format!("{score:.0}"),
        })
        .collect();
    let sale_ids = state.db.sale_items(shop_db::unix_now()).await?;
    let states = state.flash.states(&sale_ids).await.unwrap_or_default();
    let sales = sale_ids
        .iter()
        .zip(states.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(id, s)| OpsSale {
            id: id.get(),
            stock: s
                .and_then(Option::as_ref)
                .map_or_else(|| "not loaded".to_owned(), |s| s.stock.to_string()),
        })
        .collect();
    let totals = state.metrics.totals();
    let looked = totals.hits + totals.misses;
    let samples = state.traffic.samples();
    let series = |f: fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
    let page = OpsPage {
        sessions: sessions.map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
        hit_ratio: if looked == 0 {
            "no lookups yet".to_owned()
        } else {
            format!("{:.1}%", 100.0 * totals.hits as f64 / looked as f64)
        },
        cleaned: state
            .metrics
            .cleaner_removed()
            .map_or_else(|| "not run here".to_owned(), |n| n.to_string()),
        row_lag: lag.map_or_else(|| "none due".to_owned(), |s| format!("{s:.1} s")),
        top,
        sales,
        seconds: samples.len(),
        rate_plot: plot(&[("requests/s", "#2563eb", &series(|s| s.requests))]),
        p99_plot: plot(&[("p99 ms", "#dc2626", &series(|s| s.p99_ms))]),
        cache_plot: plot(&[
            ("hits/s", "#16a34a", &series(|s| s.hits)),
            ("misses/s", "#ea580c", &series(|s| s.misses)),
        ]),
    };
    Ok((
        [
            (header::CACHE_CONTROL, crate::PERSONAL),
            (header::REFRESH, "5"),
        ],
        templates::render(&page)?,
    )
        .into_response())
}

/// Plot width and height, in SVG units.
const PLOT: (f64, f64) = (600.0, 160.0);

/// An SVG line plot of `series` (label, colour, values one per second, oldest
/// first) on one scale from 0 to the largest value. Built from numbers and the
/// constant labels only, so it is safe to put in the page unescaped.
pub fn plot(series: &[(&str, &str, &[f64])]) -> String {
    let (w, h) = PLOT;
    let max = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    let top = if max > 0.0 { max * 1.1 } else { 1.0 };
    let mut svg = format!(
        "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {}\" \
         width=\"{w}\" height=\"{}\" role=\"img\">\
         <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#f8fafc\" stroke=\"#cbd5e1\"/>\
         <text x=\"4\" y=\"12\" font-size=\"11\">{top:.1}</text>\
         <text x=\"4\" y=\"{}\" font-size=\"11\">0</text>",
        h + 20.0,
        h + 20.0,
        h - 4.0,
    );
    for (i, (label, colour, values)) in series.iter().enumerate() {
        let step = w / (HISTORY.max(2) - 1) as f64;
        // The newest sample at the right edge.
        let offset = w - step * values.len().saturating_sub(1) as f64;
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(x, v)| {
                let v = if v.is_finite() { *v } else { 0.0 };
                format!(
                    "{:.1},{:.1}",
                    offset + step * x as f64,
                    h - (v / top) * (h - 4.0)
                )
            })
            .collect();
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" \
             data-series=\"{label}\" points=\"{}\"/>",
            points.join(" ")
        ));
        let last = values
            .last()
            .copied()
            .filter(|v| v.is_finite())
            .unwrap_or(0.0);
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"{colour}\">{label}: {last:.1}</text>",
            10.0 + 160.0 * i as f64,
            h + 16.0
        ));
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_the_difference_per_second() {
        let mut before = Totals::default();
        let mut after = Totals {
            requests: 200,
            hits: 150,
            misses: 10,
            ..Totals::default()
        };
        // 190 requests within 1 ms, 8 more within 5 ms, 2 slower than 2.5 s.
        for (i, bound) in Totals::BOUNDS.iter().enumerate() {
            after.buckets[i] = if *bound >= 0.005 {
                198
            } else if *bound >= 0.001 {
                190
            } else {
                0
            };
        }
        let s = sample(&before, &after, 2.0);
        assert_eq!(s.requests, 100.0);
        assert_eq!(s.hits, 75.0);
        assert_eq!(s.misses, 5.0);
        // The 198th of 200 is the 99th percentile: within 5 ms.
        assert_eq!(s.p99_ms, 5.0);
        before = after;
        let idle = sample(&before, &after, 1.0);
        assert_eq!((idle.requests, idle.p99_ms), (0.0, 0.0));
    }

    #[test]
    fn the_ring_keeps_the_last_five_minutes() {
        let traffic = Traffic::default();
        for i in 0..HISTORY + 10 {
            traffic.push(Sample {
                requests: i as f64,
                p99_ms: 0.0,
                hits: 0.0,
                misses: 0.0,
            });
        }
        let samples = traffic.samples();
        assert_eq!(samples.len(), HISTORY);
        assert_eq!(samples[0].requests, 10.0);
    }

    #[test]
    fn a_plot_has_a_point_per_sample() {
        let svg = plot(&[("a", "#000", &[1.0, 2.0, 3.0]), ("b", "#111", &[])]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        let a = svg.split("data-series=\"a\" points=\"").nth(1).unwrap();
        assert_eq!(a.split('"').next().unwrap().split(' ').count(), 3);
        assert!(svg.contains("a: 3.0"));
        let odd = plot(&[("x", "#000", &[f64::NAN, f64::INFINITY])]);
        assert!(!odd.contains("NaN") && !odd.contains("inf"), "{odd}");
    }
}
