//! The flash-sale scenario of `shop load`: a burst of buyers at the start of a sale.
//!
//! Every buyer (a logged-in session's cookie, prepared by the caller) sends one
//! `POST /api/flash/{item}/buy` with its own idempotency key. All connections are
//! opened first and start together, so the sale sees the burst a real one sees;
//! each takes the next buyer as soon as its last answer came (closed loop). The
//! report counts answers by status and by outcome (`bought`, `sold_out`, ...),
//! buys per second over the burst, and latency from an HDR histogram.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::Barrier;

use crate::client::Conn;
use crate::report::Latency;

/// What to run.
#[derive(Debug, Clone)]
pub struct FlashLoad {
    /// The shop: `host:port` (or `http://host:port`, see [`crate::target`]).
    pub target: String,
    /// The item on sale.
    pub item: u64,
    /// One session cookie (`shop_session=...`) per buyer.
    pub cookies: Vec<String>,
    /// Concurrent connections.
    pub connections: usize,
    /// Prefix of the idempotency keys (`<prefix>-<buyer>`), so runs do not collide.
    pub key_prefix: String,
}

/// What a flash-sale run measured.
#[derive(Debug, Clone, Serialize)]
pub struct FlashReport {
    /// Buyers (one buy each).
    pub buyers: usize,
    /// Connections used.
    pub connections: usize,
    /// From the start of the burst to the last answer, seconds.
    pub duration_s: f64,
    /// Answered buys per second over the burst.
    pub buys_per_second: f64,
    /// Latency of the answered buys, microseconds.
    pub latency_us: Latency,
    /// Count per HTTP status.
    pub statuses: BTreeMap<u16, u64>,
    /// Count per outcome (`bought`, `sold_out`, ...; an error's code for errors).
    pub outcomes: BTreeMap<String, u64>,
    /// Buys that got no answer (could not connect, or the connection broke).
    pub connection_failures: u64,
    /// Different order ids among the `bought` answers (each unit sold once: this
    /// equals the `bought` count).
    pub distinct_orders: usize,
}

impl FlashReport {
    /// Answers with a 5xx status.
    pub fn server_errors(&self) -> u64 {
        self.statuses
            .iter()
            .filter(|(s, _)| **s >= 500)
            .map(|(_, n)| n)
            .sum()
    }

    /// The report as text for people.
    pub fn render(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        let l = &self.latency_us;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "flash sale: {} buyers over {} connections, burst took {:.2} s, {:.0} buys/s",
            self.buyers, self.connections, self.duration_s, self.buys_per_second
        );
        let _ = writeln!(
            out,
            "latency    p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            ms(l.p50),
            ms(l.p90),
            ms(l.p99),
            ms(l.max)
        );
        let join = |m: &BTreeMap<_, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let statuses: BTreeMap<String, u64> = self
            .statuses
            .iter()
            .map(|(s, n)| (s.to_string(), *n))
            .collect();
        let _ = writeln!(out, "statuses   {}", join(&statuses));
        let _ = writeln!(out, "outcomes   {}", join(&self.outcomes));
        let _ = writeln!(
            out,
            "failures   {} connection failures, {} 5xx; {} different orders in the answers",
            self.connection_failures,
            self.server_errors(),
            self.distinct_orders
        );
        out
    }
}

/// One connection's tally.
struct Tally {
    latency: Histogram<u64>,
    statuses: BTreeMap<u16, u64>,
    outcomes: BTreeMap<String, u64>,
    failures: u64,
    last_answer: Instant,
    orders: Vec<i64>,
}

/// Runs the burst and returns the report.
pub async fn run(mut config: FlashLoad) -> anyhow::Result<FlashReport> {
    anyhow::ensure!(config.connections > 0, "at least one connection");
    config.target = crate::address(&config.target, crate::target)?;
    let config = Arc::new(config);
    let next = Arc::new(AtomicUsize::new(0));
    let connections = config.connections.min(config.cookies.len().max(1));
    let start = Arc::new(Barrier::new(connections + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (config, next, start) = (config.clone(), next.clone(), start.clone());
        tasks.spawn(async move {
            let conn = Conn::open(&config.target).await;
            start.wait().await;
            buyer_loop(&config, &next, conn.ok()).await
        });
    }
    start.wait().await;
    let began = Instant::now();
    let mut latency = crate::tally::new_histogram();
    let mut statuses = BTreeMap::new();
    let mut outcomes = BTreeMap::new();
    let (mut failures, mut last) = (0, began);
    let mut orders = Vec::new();
    while let Some(tally) = tasks.join_next().await {
        let tally = tally?;
        latency.add(&tally.latency)?;
        for (s, n) in tally.statuses {
            *statuses.entry(s).or_default() += n;
        }
        for (o, n) in tally.outcomes {
            *outcomes.entry(o).or_default() += n;
        }
        failures += tally.failures;
        last = last.max(tally.last_answer);
        orders.extend(tally.orders);
    }
    let duration = last.duration_since(began).max(Duration::from_micros(1));
    Ok(FlashReport {
        buyers: config.cookies.len(),
        connections,
        duration_s: duration.as_secs_f64(),
        buys_per_second: latency.len() as f64 / duration.as_secs_f64(),
        latency_us: Latency::of(&latency),
        statuses,
        outcomes,
        connection_failures: failures,
        distinct_orders: {
            orders.sort_unstable();
            orders.dedup();
            orders.len()
        },
    })
}

/// Buys for the next buyer until none is left.
async fn buyer_loop(config: &FlashLoad, next: &AtomicUsize, mut conn: Option<Conn>) -> Tally {
    let mut tally = Tally {
        latency: crate::tally::new_histogram(),
        statuses: BTreeMap::new(),
        outcomes: BTreeMap::new(),
        failures: 0,
        last_answer: Instant::now(),
        orders: Vec::new(),
    };
    let path = format!("/api/flash/{}/buy", config.item);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(cookie) = config.cookies.get(i) else {
            return tally;
        };
        let key = format!("{}-{i}", config.key_prefix);
        let headers = [
            ("idempotency-key", key.as_str()),
            ("accept", "application/json"),
        ];
        if conn.as_ref().is_none_or(Conn::is_closed) {
            conn = Conn::open(&config.target).await.ok();
        }
        let Some(open) = conn.as_mut() else {
            tally.failures += 1;
            continue;
        };
        let sent = Instant::now();
        match open
            .send_with("POST", &path, Some(cookie), None, &headers)
            .await
        {
            Ok(reply) => {
                let now = Instant::now();
                let micros = now.duration_since(sent).as_micros().max(1) as u64;
                let _ = tally.latency.record(micros.min(60_000_000));
                tally.last_answer = now;
                *tally.statuses.entry(reply.status).or_default() += 1;
                let body: serde_json::Value =
                    serde_json::from_slice(&reply.body).unwrap_or_default();
                let outcome = body["outcome"]
                    .as_str()
                    .or(body["error"].as_str())
                    .unwrap_or("unreadable")
                    .to_owned();
                tally.orders.extend(body["order_id"].as_i64());
                *tally.outcomes.entry(outcome).or_default() += 1;
            }
            Err(_) => {
                tally.failures += 1;
                conn = None;
            }
        }
    }
}
