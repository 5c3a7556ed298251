//! An evaluation of "shoppers who bought this also bought" you can rerun: orders
//! generated from a known model, recorded through the shop's own
//! `Insights::record_order` into a private redis-server, then each ranking judged
//! against what the model planted.
//!
//! The model: `ITEMS` items whose popularity follows Zipf's law (exponent 1); each
//! of `ORDERS` orders draws 1 to 4 items by popularity; `PAIRS` planted pairs of
//! items ranked 20 to 300: an order holding one item of a pair gets the other too
//! with the probability that makes the pair `LIFT` times as likely together as
//! popularity alone predicts (10; `LIFT=` overrides; the realised lift is printed).
//!
//! The figures, for each ranking:
//! - precision@5 of the planted pairs: the share of planted items whose partner is
//!   in their top 5;
//! - best-seller intrusion: the share of the other items (bought at least 20 times,
//!   in no pair) whose top 5 holds one of the 100 best sellers.
//!
//! Rankings, all from the same orders:
//! - raw co-purchase counts: the top 5 of the stored `also:<item>` counts, as the
//!   shop ranked them before;
//! - the shop's score (`Insights::get`): how far the orders known to hold both
//!   beat what the two items' popularity predicts, `(c - E) / sqrt(E)`, past the
//!   minimum of co-buyers;
//! - the ceiling: the same score from exact counts of every pair, which the bench
//!   tallies as it generates the orders.
//!
//! And what recording costs: the commands the shop sends per order, the commands
//! Redis runs per order (those inside scripts counted, from `INFO commandstats`),
//! and the memory of the also-bought lists per item.
//!
//! Run: `cargo bench -p shop-cache --bench recommendations` (about 40 s after the build).

#![allow(missing_docs)]

use std::collections::{HashMap, HashSet};

use shop_cache::domain::{ItemId, SessionToken};
use shop_cache::insights::{
    ALSO_BOUGHT_CAP, ALSO_BOUGHT_SHOWN, Candidate, DEFAULT_MIN_CO_BUYERS, Insights,
    rank_also_bought,
};
use shop_cache::keys::Keys;
use shop_testkit::TestRedis;

const ITEMS: u64 = 2_000;
const ORDERS: u64 = 200_000;
const PAIRS: u64 = 50;
/// The lift planted (`LIFT=` overrides).
const LIFT: f64 = 10.0;
/// The mean number of items drawn for an order (1 to 4).
const MEAN_DRAWS: f64 = 2.5;
const BEST_SELLERS: usize = 100;

/// A small deterministic generator (xorshift64*), so every run sees the same orders.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(run());
}

async fn run() {
    let server = TestRedis::start();
    let conn = shop_cache::connect(&server.url()).await.unwrap();
    let keys = Keys::default();
    let insights = Insights::new(conn.clone(), keys.clone());

    // Zipf over ranks 1..=ITEMS, item n at rank n.
    let weights: Vec<f64> = (1..=ITEMS).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(weights.len());
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cumulative.push(acc);
    }
    let lift: f64 = std::env::var("LIFT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(LIFT);
    // The chance an order holds item n by popularity alone, about.
    let base = |n: u64| (MEAN_DRAWS * weights[n as usize - 1] / total).min(1.0);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let draw = |rng: &mut Rng| -> u64 {
        let u = rng.unit();
        cumulative.partition_point(|&c| c < u) as u64 + 1
    };
    // Planted pairs: 2 * PAIRS distinct items among ranks 20..300 (bought often
    // enough for a pair to show, and far from the best sellers).
    let mut partner: HashMap<u64, u64> = HashMap::new();
    while partner.len() < 2 * PAIRS as usize {
        let a = 20 + rng.next() % 280;
        let b = 20 + rng.next() % 280;
        if a != b && !partner.contains_key(&a) && !partner.contains_key(&b) {
            partner.insert(a, b);
            partner.insert(b, a);
        }
    }

    let mut raw_conn = server.conn().await;
    let sent_before = conn.commands_sent();
    let run_before = commands_run(&mut raw_conn).await;
    let started = std::time::Instant::now();
    let mut bought: HashMap<u64, u64> = HashMap::new();
    let mut together: HashMap<(u64, u64), u64> = HashMap::new();
    for _ in 0..ORDERS {
        let size = 1 + rng.next() % 4;
        let mut order: Vec<u64> = Vec::new();
        for _ in 0..size {
            let x = draw(&mut rng);
            if !order.contains(&x) {
                order.push(x);
            }
        }
        for x in order.clone() {
            if let Some(&y) = partner.get(&x)
                && !order.contains(&y)
                && rng.unit() < (lift - 1.0) * base(y)
            {
                order.push(y);
            }
        }
        for &x in &order {
            *bought.entry(x).or_default() += 1;
            for &y in &order {
                if x < y {
                    *together.entry((x, y)).or_default() += 1;
                }
            }
        }
        let ids: Vec<ItemId> = order.iter().map(|&n| item(n)).collect();
        insights
            .record_order(&SessionToken::generate(), &ids)
            .await
            .unwrap();
    }
    let recording = started.elapsed();
    let sent = conn.commands_sent() - sent_before;
    let run = commands_run(&mut raw_conn).await - run_before - 1;
    // The realised lift of the planted pairs: co-purchases against what
    // popularity alone predicts.
    let lifts: Vec<f64> = partner
        .iter()
        .filter(|(a, b)| a < b)
        .map(|(a, b)| {
            let c = *together.get(&(*a, *b)).unwrap_or(&0) as f64;
            let expected = bought[a] as f64 * bought[b] as f64 / ORDERS as f64;
            c / expected
        })
        .collect();
    let mean_lift = lifts.iter().sum::<f64>() / lifts.len() as f64;

    let mut by_sales: Vec<(u64, u64)> = bought.iter().map(|(&i, &n)| (i, n)).collect();
    by_sales.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    let best: HashSet<u64> = by_sales
        .iter()
        .take(BEST_SELLERS)
        .map(|(i, _)| *i)
        .collect();
    let others: Vec<u64> = by_sales
        .iter()
        .filter(|(i, n)| *n >= 20 && !partner.contains_key(i) && !best.contains(i))
        .map(|(i, _)| *i)
        .collect();

    // The two rankings of one item's list: raw counts, and the shop's score.
    let mut rank = async |x: u64| -> (Vec<u64>, Vec<u64>) {
        let raw: Vec<(u64, f64)> = redis::cmd("ZRANGE")
            .arg(keys.also_bought(item(x)))
            .arg(0)
            .arg(ALSO_BOUGHT_SHOWN - 1)
            .arg("REV")
            .arg("WITHSCORES")
            .query_async(&mut raw_conn)
            .await
            .unwrap();
        let scored = insights
            .get(item(x))
            .await
            .unwrap()
            .also_bought
            .iter()
            .take(ALSO_BOUGHT_SHOWN)
            .map(|a| a.item.get())
            .collect();
        (raw.iter().map(|(i, _)| *i).collect(), scored)
    };

    // The ceiling: the same score from exact counts of every pair (what the shop
    // could reach if it kept them all; it keeps ALSO_BOUGHT_CAP per item).
    let mut pairs_of: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for (&(a, b), &c) in &together {
        pairs_of.entry(a).or_default().push((b, c));
        pairs_of.entry(b).or_default().push((a, c));
    }
    let exact = |x: u64| -> Vec<u64> {
        let candidates: Vec<Candidate> = pairs_of
            .get(&x)
            .into_iter()
            .flatten()
            .map(|(j, c)| Candidate {
                item: item(*j),
                co_buyers: *c as f64,
                bought: Some(bought[j] as f64),
            })
            .collect();
        rank_also_bought(
            bought[&x] as f64,
            ORDERS as f64,
            &candidates,
            DEFAULT_MIN_CO_BUYERS as f64,
        )
        .iter()
        .take(ALSO_BOUGHT_SHOWN)
        .map(|a| a.item.get())
        .collect()
    };
    let (mut hits_raw, mut hits_lift, mut hits_exact) = (0, 0, 0);
    for (&x, &y) in &partner {
        let (raw, lifted) = rank(x).await;
        hits_raw += usize::from(raw.contains(&y));
        hits_lift += usize::from(lifted.contains(&y));
        hits_exact += usize::from(exact(x).contains(&y));
    }
    let (mut intr_raw, mut intr_lift, mut intr_exact) = (0, 0, 0);
    for &x in &others {
        let (raw, lifted) = rank(x).await;
        intr_raw += usize::from(raw.iter().any(|j| best.contains(j)));
        intr_lift += usize::from(lifted.iter().any(|j| best.contains(j)));
        intr_exact += usize::from(exact(x).iter().any(|j| best.contains(j)));
    }
    let planted = partner.len() as f64;
    let other = others.len().max(1) as f64;
    println!(
        "{ORDERS} orders over {ITEMS} items (Zipf), {PAIRS} planted pairs (lift planted {lift}, realised {mean_lift:.1} on average), {} other items bought 20+ times",
        others.len()
    );
    println!(
        "  raw co-purchase counts (the shop before):  precision@5 of the planted pairs {:.2} | a top-{BEST_SELLERS} best seller in another item's top 5: {:.0}%",
        hits_raw as f64 / planted,
        100.0 * intr_raw as f64 / other
    );
    println!(
        "  the shop's score ((c - E) / sqrt(E) over counts since entry, >= {DEFAULT_MIN_CO_BUYERS} orders together): precision@5 {:.2} | best seller in another's top 5: {:.0}%",
        hits_lift as f64 / planted,
        100.0 * intr_lift as f64 / other
    );
    println!(
        "  the same score from exact counts of every pair (the ceiling): precision@5 {:.2} | best seller in another's top 5: {:.0}%",
        hits_exact as f64 / planted,
        100.0 * intr_exact as f64 / other
    );

    // What recording cost, and what it keeps.
    let lists: Vec<String> = redis::cmd("KEYS")
        .arg("also:*")
        .query_async(&mut raw_conn)
        .await
        .unwrap();
    let (mut list_bytes, mut full) = (0u64, 0u64);
    for list in &lists {
        let (bytes, size): (Option<u64>, u64) = redis::pipe()
            .cmd("MEMORY")
            .arg("USAGE")
            .arg(list)
            .zcard(list)
            .query_async(&mut raw_conn)
            .await
            .unwrap();
        list_bytes += bytes.unwrap_or(0);
        full += u64::from(size as usize >= ALSO_BOUGHT_CAP);
    }
    let popularity: (Option<u64>, Option<u64>) = redis::pipe()
        .cmd("MEMORY")
        .arg("USAGE")
        .arg(keys.bought())
        .cmd("MEMORY")
        .arg("USAGE")
        .arg(keys.orders())
        .query_async(&mut raw_conn)
        .await
        .unwrap();
    let n = lists.len().max(1) as f64;
    println!(
        "  recording: {:.1} commands sent per order, {:.1} run by Redis per order (inside scripts counted), {:.0} orders/s one at a time",
        sent as f64 / ORDERS as f64,
        run as f64 / ORDERS as f64,
        ORDERS as f64 / recording.as_secs_f64()
    );
    println!(
        "  kept: {} items with a list ({full} full at {ALSO_BOUGHT_CAP}), {:.0} bytes a list on average; bought: {} bytes, orders: {} bytes",
        lists.len(),
        list_bytes as f64 / n,
        popularity.0.unwrap_or(0),
        popularity.1.unwrap_or(0),
    );
}

/// Every command Redis has run (`INFO commandstats`, those inside scripts
/// included), this `INFO` too.
async fn commands_run(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}
