//! The load generator behind `shop load`: drives a running shop over HTTP the way
//! the Fake Web Retailer's traffic would.
//!
//! Many shoppers, each with a cookie jar (the session token the shop gave it) and a
//! browser's `User-Agent`, pick items by Zipf popularity over the catalogue; the
//! request mix is mostly item views, some home pages, listings, searches, cart adds,
//! logins and checkouts (about 0.1% of views). Each page is viewed as a browser
//! views it ([`Mix::page_parts`]): the HTML, then `/api/me` (and an item page's
//! insights where the page does not carry them), and the report counts page views
//! and times each part. Closed loop (N connections, each sending as soon as the last answer came)
//! or open loop (a target rate; latency counted from when each request was due, so a
//! slow server cannot hide queueing). It ends with a [`Report`]: throughput, latency
//! percentiles from an HDR histogram, status counts, and the page cache's hit ratio
//! read from the shop's `/metrics`.
//!
//! A target that cannot be reached is reported apart from the shop's answers: each
//! virtual connection backs off exponentially between attempts to connect (see
//! `client::Backoff`), and the report counts connection failures (a connect that
//! failed, a connection that broke before the answer) separately from HTTP errors
//! (answers with a 4xx or 5xx status).

mod client;
pub mod flash;
mod mix;
mod report;
mod requests;
mod rng;
mod tally;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

pub use client::{metrics_target, target};
pub use mix::Mix;
pub use report::{CacheStats, Report};

use client::{Backoff, Conn};
use mix::Action;
use requests::{learn, request_for};
use rng::{Rng, Zipf};
use tally::{Part, Tally};

/// The per-user call as every page's script makes it: asking for only the
/// recently viewed items the page shows (`shop_web::me::PAGE_RECENT`, and
/// `RECENT_SHOWN` in the shop's `shop.js`; the shop's tests hold the three
/// together).
pub const ME: &str = "/api/me?recent=6";

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The shop: `host:port` (or `http://host:port`, see [`target`]).
    pub target: String,
    /// Where the shop serves `/metrics` (its operators' address, `host:port`),
    /// read before and after the run for the page cache's counters; `None`: the
    /// target's host on the next port (`shop serve`'s default).
    pub metrics: Option<String>,
    /// Concurrent connections (closed loop: also concurrent shoppers in flight).
    pub connections: usize,
    /// Stop after this long...
    pub duration: Option<Duration>,
    /// ...or after this many requests (whichever comes first; one is required), a
    /// page view with its parts counting as one.
    pub requests: Option<u64>,
    /// Open loop at this many requests per second (a page view with its parts
    /// counting as one); `None`: closed loop.
    pub rate: Option<f64>,
    /// Items in the catalogue (ids 1..=items).
    pub items: u64,
    /// The Zipf exponent of item popularity (1.0: the classic 1/rank).
    pub zipf_exponent: f64,
    /// Distinct shoppers (cookie jars).
    pub shoppers: usize,
    /// The request mix.
    pub mix: Mix,
    /// The catalogue's departments, for listing pages (`/c/{category}`).
    pub categories: Vec<String>,
    /// Words searches pick from (one or two per search).
    pub search_words: Vec<String>,
    /// The seed of every random choice, for repeatable runs.
    pub seed: u64,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            target: "127.0.0.1:8080".to_owned(),
            metrics: None,
            connections: 50,
            duration: Some(Duration::from_secs(10)),
            requests: None,
            rate: None,
            items: 100_000,
            zipf_exponent: 1.0,
            shoppers: 10_000,
            mix: Mix::default(),
            categories: Vec::new(),
            search_words: Vec::new(),
            seed: 1,
            progress: true,
        }
    }
}

/// A shopper's cookie jar and what it knows about its own session.
#[derive(Debug, Clone, Default)]
struct Shopper {
    cookie: Option<String>,
    logged_in: bool,
    cart_lines: u32,
    /// The `cart_version` of the cart page it last saw, while its cart is as that
    /// page showed it: a checkout confirms it; without one, a checkout first
    /// looks at the cart page, as a person does.
    cart_version: Option<String>,
}

struct Shared {
    config: LoadConfig,
    zipf: Zipf,
    shoppers: Vec<Mutex<Shopper>>,
    issued: AtomicU64,
    /// Cancelled when the duration has passed: wakes connections that are backing
    /// off or connecting.
    stop: CancellationToken,
    /// Cancelled when every request of a request count was issued: wakes the
    /// connections that are backing off (they have nothing left to send), but not
    /// those connecting to send one of the last requests.
    drained: CancellationToken,
    started: Instant,
    progress: indicatif::ProgressBar,
    /// Whether the shop's item pages carry their insights, as the first one
    /// answered said (looked at once: decompressing and searching every page
    /// would take the load generator's CPU from the shop on a shared machine).
    pages_carry_insights: std::sync::OnceLock<bool>,
}

/// Runs the load and returns the report.
pub async fn run(mut config: LoadConfig) -> anyhow::Result<Report> {
    config.target = address(&config.target, target)?;
    config.metrics = config
        .metrics
        .as_deref()
        .map(|given| address(given, metrics_target))
        .transpose()?;
    if config.duration.is_none() && config.requests.is_none() {
        bail!("give a duration or a request count");
    }
    if config.connections == 0 || config.shoppers == 0 || config.items == 0 {
        bail!("connections, shoppers and items must be at least 1");
    }
    if config.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        bail!("the rate must be a positive number of requests per second");
    }
    let metrics = config
        .metrics
        .clone()
        .unwrap_or_else(|| next_port(&config.target));
    let before = report::read_cache_stats(&metrics).await.ok();
    let progress = if config.progress {
        let bar = match config.requests {
            Some(n) => indicatif::ProgressBar::new(n),
            None => indicatif::ProgressBar::new(config.duration.map_or(0, |d| d.as_secs())),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("load {bar:40} {pos}/{len} {msg}")
                .expect("a valid progress template"),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let shared = Arc::new(Shared {
        zipf: Zipf::new(config.items, config.zipf_exponent),
        shoppers: (0..config.shoppers)
            .map(|_| Mutex::new(Shopper::default()))
            .collect(),
        issued: AtomicU64::new(0),
        stop: CancellationToken::new(),
        drained: CancellationToken::new(),
        started: Instant::now(),
        progress,
        pages_carry_insights: std::sync::OnceLock::new(),
        config: config.clone(),
    });
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..config.connections {
        let shared = shared.clone();
        workers.spawn(async move { work(shared, worker as u64).await });
    }
    let ticker = {
        let shared = shared.clone();
        tokio::spawn(async move {
            while !shared.stop.is_cancelled() {
                // Wake at the end of the duration, not up to a tick after it.
                let mut tick = Duration::from_millis(200);
                if let Some(d) = shared.config.duration {
                    tick = tick.min(d.saturating_sub(shared.started.elapsed()));
                }
                tokio::select! {
                    _ = tokio::time::sleep(tick) => {}
                    _ = shared.stop.cancelled() => {}
                }
                let elapsed = shared.started.elapsed();
                if shared.config.requests.is_none() {
                    shared.progress.set_position(elapsed.as_secs());
                } else {
                    shared
                        .progress
                        .set_position(shared.issued.load(Ordering::Relaxed));
                }
                if shared.config.duration.is_some_and(|d| elapsed >= d) {
                    shared.stop.cancel();
                }
            }
        })
    };
    let mut total = Tally::new();
    while let Some(result) = workers.join_next().await {
        total.add(result.context("a load worker panicked")??);
    }
    shared.stop.cancel();
    let elapsed = shared.started.elapsed();
    let _ = ticker.await;
    shared.progress.finish_and_clear();
    let after = report::read_cache_stats(&metrics).await.ok();
    let cache = match (before, after) {
        (Some(b), Some(a)) => Some(a.since(&b)),
        _ => None,
    };
    Ok(Report::new(&config, elapsed, total, cache))
}

/// One connection's loop.
async fn work(shared: Arc<Shared>, worker: u64) -> anyhow::Result<Tally> {
    let config = &shared.config;
    let mut rng = Rng::new(config.seed.wrapping_mul(1_000_003).wrapping_add(worker));
    let mut tally = Tally::new();
    let mut conn: Option<Conn> = None;
    let mut backoff = Backoff::new();
    loop {
        if shared.stop.is_cancelled() {
            break;
        }
        let ticket = shared.issued.fetch_add(1, Ordering::Relaxed);
        if config.requests.is_some_and(|n| ticket >= n) {
            shared.drained.cancel();
            break;
        }
        // Open loop: wait for this request's turn, and count latency from it.
        let due = match config.rate {
            Some(rate) => {
                let due = shared.started + Duration::from_secs_f64(ticket as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                due
            }
            None => Instant::now(),
        };
        if shared.stop.is_cancelled() {
            break;
        }
        let second = due.duration_since(shared.started).as_secs() as usize;
        if conn.as_ref().is_some_and(Conn::is_closed) {
            conn = None;
        }
        if conn.is_none() {
            let opened = tokio::select! {
                opened = Conn::open(&config.target) => opened,
                _ = shared.stop.cancelled() => break,
            };
            match opened {
                Ok(c) => conn = Some(c),
                Err(_) => {
                    tally.connection_failed(second);
                    if pause(&shared, backoff.failed(rng.unit())).await {
                        break;
                    }
                    continue;
                }
            }
        }
        let shopper_index = rng.below(config.shoppers as u64) as usize;
        let mut shopper = shared.shoppers[shopper_index].lock().await;
        let action = config.mix.pick(&mut rng, &shopper);
        let (method, path, form) = request_for(action, &mut rng, &shared, &shopper);
        let sent = Instant::now();
        let reply = match conn.as_mut() {
            Some(c) => c
                .send(method, &path, shopper.cookie.as_deref(), form.as_deref())
                .await
                .ok(),
            None => None,
        };
        let micros = due.elapsed().as_micros() as u64;
        let answered = match reply {
            Some(reply) => {
                learn(&mut shopper, action, &reply);
                tally.answered(second, micros, reply.status);
                backoff.succeeded();
                // The rest of a page view, as its page's script asks for it.
                match config.mix.page_parts && action.is_page() && reply.status < 400 {
                    true => {
                        tally.part(Part::Html, sent.elapsed().as_micros() as u64);
                        // A page the edge served: its script names the item.
                        let me = match path.strip_prefix("/items/") {
                            Some(id) if reply.from_edge => format!("{ME}&item={id}"),
                            _ => ME.to_owned(),
                        };
                        let mut parts = vec![(Part::Me, me)];
                        // An item page that does not carry its insights: its
                        // script asks for them.
                        if let Some(id) = path.strip_prefix("/items/")
                            && !*shared
                                .pages_carry_insights
                                .get_or_init(|| reply.holds(INLINE_INSIGHTS))
                        {
                            parts.push((Part::Insights, format!("/api/items/{id}/insights")));
                        }
                        page_parts(conn.as_mut(), &mut shopper, &parts, second, &mut tally).await
                    }
                    false => true,
                }
            }
            None => false,
        };
        if !answered {
            // A broken connection: count it, back off, reconnect next time.
            drop(shopper);
            conn = None;
            tally.connection_failed(second);
            if pause(&shared, backoff.failed(rng.unit())).await {
                break;
            }
        }
    }
    Ok(tally)
}

/// What an item page that carries its insights holds (its script then asks for
/// none).
const INLINE_INSIGHTS: &[u8] = b"id=\"insights-data\"";

/// Sends the parts of a page view after its HTML, in order, each timed from when
/// it was sent; counts the page view when every part was answered. False when the
/// connection broke (the caller counts the failure).
async fn page_parts(
    conn: Option<&mut Conn>,
    shopper: &mut Shopper,
    parts: &[(Part, String)],
    second: usize,
    tally: &mut Tally,
) -> bool {
    let Some(conn) = conn else {
        return false;
    };
    for (part, path) in parts {
        let sent = Instant::now();
        let Ok(reply) = conn
            .send("GET", path, shopper.cookie.as_deref(), None)
            .await
        else {
            return false;
        };
        let micros = sent.elapsed().as_micros() as u64;
        if *part == Part::Me {
            learn(shopper, Action::Me, &reply);
        }
        tally.answered(second, micros, reply.status);
        tally.part(*part, micros);
    }
    tally.page_views += 1;
    true
}

/// Waits `wait` before a connection's next attempt; true when the run ended meanwhile.
async fn pause(shared: &Shared, wait: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => shared.stop.is_cancelled(),
        _ = shared.stop.cancelled() => true,
        _ = shared.drained.cancelled() => true,
    }
}

/// `given` read by `parse` ([`target`] or [`metrics_target`]), its error
/// naming what was given.
fn address(given: &str, parse: fn(&str) -> Result<String, String>) -> anyhow::Result<String> {
    parse(given).map_err(|why| anyhow::anyhow!("the address {given:?}: {why}"))
}

/// `host:port` with the port one higher: where `shop serve` puts its operators'
/// listener by default. Unchanged when there is no port to raise.
fn next_port(target: &str) -> String {
    match target.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u16>() {
            Ok(port) if port < u16::MAX => format!("{host}:{}", port + 1),
            _ => target.to_owned(),
        },
        None => target.to_owned(),
    }
}
