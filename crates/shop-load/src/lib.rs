//! The load generator behind `shop load`: drives a running shop over HTTP the way
//! the Fake Web Retailer's traffic would.
//!
//! Many shoppers, each with a cookie jar (the session token the shop gave it), pick
//! items by Zipf popularity over the catalogue; the request mix is mostly item views,
//! some home pages, `/api/me` calls, cart adds, logins and checkouts (about 0.1% of
//! views). Closed loop (N connections, each sending as soon as the last answer came)
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
mod rng;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

pub use mix::Mix;
pub use report::{CacheStats, Report};

use client::{Backoff, Conn, Reply};
use mix::Action;
use rng::{Rng, Zipf};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The shop: `host:port`.
    pub target: String,
    /// Where the shop serves `/metrics` (its operators' address, `host:port`),
    /// read before and after the run for the page cache's counters; `None`: the
    /// target's host on the next port (`shop serve`'s default).
    pub metrics: Option<String>,
    /// Concurrent connections (closed loop: also concurrent shoppers in flight).
    pub connections: usize,
    /// Stop after this long...
    pub duration: Option<Duration>,
    /// ...or after this many requests (whichever comes first; one is required).
    pub requests: Option<u64>,
    /// Open loop at this many requests per second; `None`: closed loop.
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

/// Demo accounts `shop seed` creates; shoppers who log in use these.
const LOGINS: [(&str, &str); 3] = [
    ("alice", "alice-password"),
    ("bob", "bob-password"),
    ("carol", "carol-password"),
];

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
}

/// One second of a tally.
struct Slot {
    /// Latency of the requests due in that second and answered.
    latency: Histogram<u64>,
    /// Requests due in that second that got no answer: see [`Tally::connection_failures`].
    connection_failures: u64,
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
struct Tally {
    /// Latency of the answered requests.
    latency: Histogram<u64>,
    /// Per second since the start.
    timeline: Vec<Slot>,
    /// Answered requests per HTTP status (HTTP errors are the 4xx and 5xx here).
    statuses: std::collections::BTreeMap<u16, u64>,
    /// Requests that got no answer because no connection could be opened, or the
    /// connection broke before the answer. Not latencies: a refused connect takes
    /// microseconds and would flatter the percentiles.
    connection_failures: u64,
}

impl Tally {
    fn new() -> Self {
        Self {
            latency: new_histogram(),
            timeline: Vec::new(),
            statuses: Default::default(),
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
    fn answered(&mut self, second: usize, micros: u64, status: u16) {
        let micros = micros.max(1);
        let _ = self.latency.record(micros);
        let _ = self.slot(second).latency.record(micros);
        *self.statuses.entry(status).or_default() += 1;
    }

    /// A request lost to a connection failure.
    fn connection_failed(&mut self, second: usize) {
        self.connection_failures += 1;
        self.slot(second).connection_failures += 1;
    }

    /// Adds another worker's tally.
    fn add(&mut self, other: Tally) {
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
    }
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    // 1 us .. 60 s at 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Runs the load and returns the report.
pub async fn run(config: LoadConfig) -> anyhow::Result<Report> {
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
    let timeline: Vec<(&Histogram<u64>, u64)> = total
        .timeline
        .iter()
        .map(|slot| (&slot.latency, slot.connection_failures))
        .collect();
    Ok(Report::new(
        &config,
        elapsed,
        &total.latency,
        &timeline,
        total.statuses,
        total.connection_failures,
        cache,
    ))
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
        let reply = match conn.as_mut() {
            Some(c) => c
                .send(method, &path, shopper.cookie.as_deref(), form.as_deref())
                .await
                .ok(),
            None => None,
        };
        let micros = due.elapsed().as_micros() as u64;
        match reply {
            Some(reply) => {
                learn(&mut shopper, action, &reply);
                tally.answered(second, micros, reply.status);
                backoff.succeeded();
            }
            None => {
                // A broken connection: count it, back off, reconnect next time.
                drop(shopper);
                conn = None;
                tally.connection_failed(second);
                if pause(&shared, backoff.failed(rng.unit())).await {
                    break;
                }
            }
        }
    }
    Ok(tally)
}

/// Waits `wait` before a connection's next attempt; true when the run ended meanwhile.
async fn pause(shared: &Shared, wait: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => shared.stop.is_cancelled(),
        _ = shared.stop.cancelled() => true,
        _ = shared.drained.cancelled() => true,
    }
}

fn request_for(
    action: Action,
    rng: &mut Rng,
    shared: &Shared,
    shopper: &Shopper,
) -> (&'static str, String, Option<String>) {
    match action {
        Action::ViewItem => ("GET", format!("/items/{}", shared.zipf.sample(rng)), None),
        Action::Home => ("GET", "/".to_owned(), None),
        Action::Me => ("GET", "/api/me".to_owned(), None),
        Action::AddToCart => {
            let item = shared.zipf.sample(rng);
            (
                "POST",
                "/cart".to_owned(),
                Some(format!("item={item}&count=1")),
            )
        }
        Action::Login => {
            let (name, password) = LOGINS[rng.below(LOGINS.len() as u64) as usize];
            (
                "POST",
                "/login".to_owned(),
                Some(format!("name={name}&password={password}")),
            )
        }
        Action::Checkout => match &shopper.cart_version {
            Some(version) => {
                let key = format!("load-{}-{}", shared.config.seed, rng.next());
                (
                    "POST",
                    "/checkout".to_owned(),
                    Some(format!("key={key}&cart_version={version}")),
                )
            }
            None => ("GET", "/cart".to_owned(), None),
        },
        Action::Browse => {
            // Half the time the first page, else a page anywhere in the catalogue:
            // after a multiple of the shop's 24 items a page, where the whole
            // listing's "next" links lead (and the pages the shop caches) in a
            // catalogue of consecutive ids; in a department, such an `after` is
            // rarely where its links lead, so those are rendered each time, as a
            // crawler's made-up pages are.
            let after = if rng.unit() < 0.5 {
                String::new()
            } else {
                let pages = (shared.config.items / 24).max(1);
                format!("?after={}", 24 * (1 + rng.below(pages)))
            };
            let categories = &shared.config.categories;
            let path = if categories.is_empty() || rng.unit() < 0.3 {
                "/items".to_owned()
            } else {
                format!(
                    "/c/{}",
                    categories[rng.below(categories.len() as u64) as usize]
                )
            };
            ("GET", format!("{path}{after}"), None)
        }
        Action::Search => {
            let words = &shared.config.search_words;
            let q = if words.is_empty() {
                "item".to_owned()
            } else {
                let two = rng.unit() < 0.5;
                let mut pick = || words[rng.below(words.len() as u64) as usize].clone();
                if two {
                    format!("{}+{}", pick(), pick())
                } else {
                    pick()
                }
            };
            ("GET", format!("/search?q={q}"), None)
        }
        Action::SignUp => {
            let name = format!(
                "load{}x{}",
                shared.config.seed,
                rng.next() % 1_000_000_000_000
            );
            (
                "POST",
                "/signup".to_owned(),
                Some(format!("name={name}&password=load-password")),
            )
        }
    }
}

/// Updates the shopper from the answer: a new session cookie, a login, a cart.
fn learn(shopper: &mut Shopper, action: Action, reply: &Reply) {
    if let Some(cookie) = &reply.session_cookie {
        if shopper.cookie.as_ref() != Some(cookie)
            && !matches!(action, Action::Login | Action::SignUp)
        {
            // A fresh session (first visit, or the old one was cleaned).
            shopper.logged_in = false;
            shopper.cart_lines = 0;
        }
        shopper.cookie = Some(cookie.clone());
    }
    let ok = reply.status < 400;
    match action {
        Action::Login | Action::SignUp if ok => shopper.logged_in = true,
        Action::AddToCart if ok => {
            shopper.cart_lines += 1;
            shopper.cart_version = None;
        }
        // The cart page (or a refused checkout's, showing what changed) carries
        // the version to confirm; a placed order empties the cart.
        Action::Checkout => match cart_version_in(&reply.body) {
            Some(version) => shopper.cart_version = Some(version),
            None if ok => {
                shopper.cart_lines = 0;
                shopper.cart_version = None;
            }
            None => shopper.cart_version = None,
        },
        _ => {}
    }
}

/// The `cart_version` a cart page's checkout form carries, if `body` is one.
fn cart_version_in(body: &[u8]) -> Option<String> {
    const FIELD: &[u8] = b"name=\"cart_version\" value=\"";
    let start = body.windows(FIELD.len()).position(|w| w == FIELD)? + FIELD.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    String::from_utf8(body[start..start + len].to_vec()).ok()
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
