//! The end-of-run report: text for people, JSON for tools, an SVG of latency over time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::LoadConfig;
use crate::client::Conn;
use crate::tally::Tally;

/// Page-cache counters from the shop's `/metrics` (summed over its cached pages).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CacheStats {
    /// Served from Redis.
    pub hits: u64,
    /// Rendered and stored.
    pub misses: u64,
    /// Not cacheable (not popular enough, or not a cacheable request).
    pub bypasses: u64,
    /// hits / (hits + misses + bypasses).
    pub hit_ratio: f64,
}

impl CacheStats {
    /// The counts accumulated since `before`.
    pub fn since(&self, before: &CacheStats) -> CacheStats {
        let hits = self.hits.saturating_sub(before.hits);
        let misses = self.misses.saturating_sub(before.misses);
        let bypasses = self.bypasses.saturating_sub(before.bypasses);
        let all = hits + misses + bypasses;
        CacheStats {
            hits,
            misses,
            bypasses,
            hit_ratio: if all == 0 {
                0.0
            } else {
                hits as f64 / all as f64
            },
        }
    }
}

/// Reads the page-cache counters from `/metrics`.
pub async fn read_cache_stats(target: &str) -> anyhow::Result<CacheStats> {
    let mut conn = Conn::open(target).await?;
    let reply = conn.send("GET", "/metrics", None, None).await?;
    let text = String::from_utf8_lossy(&reply.body);
    let mut stats = CacheStats::default();
    for line in text
        .lines()
        .filter(|l| l.starts_with("shop_page_cache_total{"))
    {
        let value: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if line.contains("result=\"hit\"") {
            stats.hits += value;
        } else if line.contains("result=\"miss\"") {
            stats.misses += value;
        } else if line.contains("result=\"bypass\"") {
            stats.bypasses += value;
        }
    }
    Ok(stats)
}

/// Latency figures in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Slowest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl Latency {
    pub(crate) fn of(h: &Histogram<u64>) -> Self {
        Self {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// One second of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since the start.
    pub second: usize,
    /// Requests due in that second and answered.
    pub requests: u64,
    /// Requests due in that second lost to connection failures.
    pub connection_failures: u64,
    /// The answered ones' median latency, microseconds (0 when none was answered).
    pub p50_us: u64,
    /// Their 99th percentile latency, microseconds.
    pub p99_us: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The shop driven.
    pub target: String,
    /// `closed` or `open`.
    pub mode: String,
    /// Connections used.
    pub connections: usize,
    /// The open-loop target rate, if any.
    pub target_rate: Option<f64>,
    /// How long it ran, seconds.
    pub duration_s: f64,
    /// Requests answered (any status).
    pub requests: u64,
    /// Answered requests whose status was an error: 4xx or 5xx. They count in
    /// `requests` and in `statuses` too.
    pub http_errors: u64,
    /// Requests that got no answer: the connection could not be opened, or broke
    /// before the answer. Not in `requests`; each virtual connection backs off
    /// (10 ms doubling to 1 s) after one, so a target that is down is not hammered.
    pub connection_failures: u64,
    /// Answered requests per second.
    pub requests_per_second: f64,
    /// Latency over the answered requests, microseconds.
    pub latency_us: Latency,
    /// Count per HTTP status.
    pub statuses: BTreeMap<u16, u64>,
    /// Page views whose every part was answered (with [`crate::Mix::page_parts`]:
    /// the HTML, `/api/me`, an item page's insights; 0 without).
    pub page_views: u64,
    /// Page views per second.
    pub page_views_per_second: f64,
    /// Latency of each part of a page view (`html`, `me`, `insights`), each
    /// request timed from when it was sent, microseconds.
    pub parts: BTreeMap<String, Latency>,
    /// The shop's page cache during the run, if `/metrics` answered.
    pub cache: Option<CacheStats>,
    /// Per second.
    pub timeline: Vec<Second>,
}

impl Report {
    pub(crate) fn new(
        config: &LoadConfig,
        elapsed: Duration,
        tally: Tally,
        cache: Option<CacheStats>,
    ) -> Self {
        let statuses = tally.statuses;
        let requests: u64 = statuses.values().sum();
        let http_errors: u64 = statuses
            .iter()
            .filter(|(status, _)| **status >= 400)
            .map(|(_, n)| n)
            .sum();
        let secs = elapsed.as_secs_f64().max(1e-9);
        Self {
            target: config.target.clone(),
            mode: if config.rate.is_some() {
                "open"
            } else {
                "closed"
            }
            .to_owned(),
            connections: config.connections,
            target_rate: config.rate,
            duration_s: secs,
            requests,
            http_errors,
            connection_failures: tally.connection_failures,
            requests_per_second: requests as f64 / secs,
            latency_us: Latency::of(&tally.latency),
            statuses,
            page_views: tally.page_views,
            page_views_per_second: tally.page_views as f64 / secs,
            parts: tally
                .parts
                .iter()
                .map(|(part, h)| (part.name().to_owned(), Latency::of(h)))
                .collect(),
            cache,
            timeline: tally
                .timeline
                .iter()
                .enumerate()
                .filter(|(_, slot)| !slot.latency.is_empty() || slot.connection_failures > 0)
                .map(|(second, slot)| Second {
                    second,
                    requests: slot.latency.len(),
                    connection_failures: slot.connection_failures,
                    p50_us: slot.latency.value_at_quantile(0.5),
                    p99_us: slot.latency.value_at_quantile(0.99),
                })
                .collect(),
        }
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        let l = &self.latency_us;
        let mut out = String::new();
        let rate = self
            .target_rate
            .map(|r| format!(" at {r:.0} req/s"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{} loop{rate}, {} connections, {:.1} s against {}",
            self.mode, self.connections, self.duration_s, self.target
        );
        let _ = writeln!(
            out,
            "requests   {} answered ({} HTTP errors), {:.0} req/s",
            self.requests, self.http_errors, self.requests_per_second
        );
        let _ = writeln!(
            out,
            "failures   {} connection failures{}",
            self.connection_failures,
            if self.connection_failures > 0 {
                " (could not connect, or the connection broke; retried with back-off)"
            } else {
                ""
            }
        );
        if self.requests == 0 {
            out.push_str("latency    (no request was answered)\n");
        } else {
            let _ = writeln!(
                out,
                "latency    p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms",
                ms(l.p50),
                ms(l.p90),
                ms(l.p99),
                ms(l.p999),
                ms(l.max)
            );
        }
        if self.page_views > 0 {
            let parts: Vec<String> = self
                .parts
                .iter()
                .map(|(part, l)| format!("{part} p99 {:.2} ms", ms(l.p99)))
                .collect();
            let _ = writeln!(
                out,
                "page views {} ({:.0}/s): {}",
                self.page_views,
                self.page_views_per_second,
                parts.join(", ")
            );
        }
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        let _ = writeln!(out, "statuses   {}", statuses.join(", "));
        match &self.cache {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "page cache {:.1}% hits ({} hits, {} misses, {} bypasses)",
                    100.0 * c.hit_ratio,
                    c.hits,
                    c.misses,
                    c.bypasses
                );
            }
            None => out.push_str("page cache (no /metrics answer)\n"),
        }
        out
    }

    /// Writes the report as JSON.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, serde_json::to_vec_pretty(self)?)?;
        Ok(())
    }

    /// Writes an SVG line chart of p50 and p99 latency per second.
    pub fn write_svg(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.svg())?;
        Ok(())
    }

    fn svg(&self) -> String {
        let (w, h, pad) = (800.0, 400.0, 60.0);
        let seconds = self.timeline.last().map_or(1, |s| s.second + 1).max(1) as f64;
        let top = self
            .timeline
            .iter()
            .map(|s| s.p99_us)
            .max()
            .unwrap_or(1)
            .max(1) as f64
            / 1000.0;
        let x = |s: usize| pad + (w - 2.0 * pad) * (s as f64 + 0.5) / seconds;
        let y = |ms: f64| h - pad - (h - 2.0 * pad) * ms / top;
        let line = |pick: fn(&Second) -> u64| {
            self.timeline
                .iter()
                .filter(|s| s.requests > 0)
                .map(|s| format!("{:.1},{:.1}", x(s.second), y(pick(s) as f64 / 1000.0)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{pad}\" y=\"30\" font-size=\"16\">shop load: latency per second ({} loop, {} connections, {:.0} req/s)</text>\n\
             <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
             <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n",
            self.mode,
            self.connections,
            self.requests_per_second,
            b = h - pad,
            r = w - pad,
        );
        for i in 0..=4 {
            let ms = top * f64::from(i) / 4.0;
            let _ = writeln!(
                svg,
                "<text x=\"5\" y=\"{:.1}\">{ms:.2} ms</text>",
                y(ms) + 4.0
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\">seconds</text>",
            w / 2.0,
            h - 20.0
        );
        let step = ((seconds / 10.0).ceil() as usize).max(1);
        for second in (0..seconds as usize).step_by(step) {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\">{second}</text>",
                x(second) - 4.0,
                h - pad + 16.0
            );
        }
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"#c33\" stroke-width=\"2\" points=\"{}\"/>",
            line(|s| s.p99_us)
        );
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"#36c\" stroke-width=\"2\" points=\"{}\"/>",
            line(|s| s.p50_us)
        );
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"50\" fill=\"#c33\">p99</text><text x=\"{:.1}\" y=\"50\" fill=\"#36c\">p50</text>",
            w - 150.0,
            w - 100.0
        );
        svg.push_str("</svg>\n");
        svg
    }
}
