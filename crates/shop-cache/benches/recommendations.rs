//! An evaluation of "shoppers who bought this also bought" you can rerun (issue 30,
//! part 3): orders generated from a known model, recorded through the shop's own
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
//! Rankings: the shop's (`Insights::get`, raw co-purchase counts, Space-Saving at
//! `ALSO_BOUGHT_CAP`), and, from the same Redis data, the lift: the co-purchase
//! count against what the two items' buyers (their `buyers:` HyperLogLogs) and the
//! number of orders predict, with at least `MIN_SUPPORT` co-purchases and a lift
//! of `MIN_LIFT`. (The shop keeps no count of orders yet: the bench uses its own.)
//! And the ceiling: the same lift from exact counts of every pair, which the bench
//! tallies as it generates the orders.
//!
//! Run: `cargo bench -p shop-cache --bench recommendations` (about half a minute).

#![allow(missing_docs)]

use std::collections::{HashMap, HashSet};

use shop_cache::domain::{ItemId, SessionToken};
use shop_cache::insights::{ALSO_BOUGHT_SHOWN, Insights, current_window};
use shop_cache::keys::Keys;
use shop_testkit::TestRedis;

const ITEMS: u64 = 2_000;
const ORDERS: u64 = 200_000;
const PAIRS: u64 = 50;
/// The lift planted (`LIFT=` overrides).
const LIFT: f64 = 10.0;
/// The mean number of items drawn for an order (1 to 4).
const MEAN_DRAWS: f64 = 2.5;
const MIN_SUPPORT: f64 = 3.0;
/// The least lift a recommendation needs (bought together at least this many
/// times as often as popularity alone predicts).
const MIN_LIFT: f64 = 2.0;
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

    // The two rankings of one item's list.
    let window = current_window();
    let mut raw_conn = server.conn().await;
    let mut rank = async |x: u64| -> (Vec<u64>, Vec<u64>) {
        let raw: Vec<u64> = insights
            .get(item(x))
            .await
            .unwrap()
            .also_bought
            .iter()
            .map(|(i, _)| i.get())
            .collect();
        let list: Vec<(u64, f64)> = redis::cmd("ZRANGE")
            .arg(keys.also_bought(item(x)))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut raw_conn)
            .await
            .unwrap();
        let mut pipe = redis::pipe();
        for j in std::iter::once(x).chain(list.iter().map(|(j, _)| *j)) {
            pipe.cmd("PFCOUNT")
                .arg(keys.buyers(item(j), window))
                .arg(keys.buyers(item(j), window - 1));
        }
        let buyers: Vec<u64> = pipe.query_async(&mut raw_conn).await.unwrap();
        let own = buyers[0].max(1) as f64;
        // Lift: how many times more often bought together than popularity alone
        // predicts (ORDERS stands for a count of orders the shop does not keep yet).
        let mut lifted: Vec<(u64, f64)> = list
            .iter()
            .zip(&buyers[1..])
            .filter(|((_, c), _)| *c >= MIN_SUPPORT)
            .map(|((j, c), n)| (*j, c * ORDERS as f64 / (own * (*n).max(1) as f64)))
            .filter(|(_, lift)| *lift >= MIN_LIFT)
            .collect();
        lifted.sort_by(|a, b| b.1.total_cmp(&a.1));
        let lifted = lifted
            .iter()
            .take(ALSO_BOUGHT_SHOWN)
            .map(|(j, _)| *j)
            .collect();
        (raw, lifted)
    };

    // The ceiling: the same lift from exact counts of every pair (what a score
    // could reach if the shop kept them; it keeps 50 per item, by Space-Saving).
    let mut pairs_of: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for (&(a, b), &c) in &together {
        pairs_of.entry(a).or_default().push((b, c));
        pairs_of.entry(b).or_default().push((a, c));
    }
    let exact = |x: u64| -> Vec<u64> {
        let mut scored: Vec<(u64, f64)> = pairs_of
            .get(&x)
            .into_iter()
            .flatten()
            .filter(|(_, c)| *c as f64 >= MIN_SUPPORT)
            .map(|(j, c)| {
                (
                    *j,
                    *c as f64 * ORDERS as f64 / (bought[&x] * bought[j]) as f64,
                )
            })
            .filter(|(_, lift)| *lift >= MIN_LIFT)
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored
            .iter()
            .take(ALSO_BOUGHT_SHOWN)
            .map(|(j, _)| *j)
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
        "  raw co-purchase counts (the shop today):   precision@5 of the planted pairs {:.2} | a top-{BEST_SELLERS} best seller in another item's top 5: {:.0}%",
        hits_raw as f64 / planted,
        100.0 * intr_raw as f64 / other
    );
    println!(
        "  lift from the shop's Redis data (Space-Saving counts, buyers HLLs), >= {MIN_SUPPORT} together, lift >= {MIN_LIFT}: precision@5 {:.2} | best seller in another's top 5: {:.0}%",
        hits_lift as f64 / planted,
        100.0 * intr_lift as f64 / other
    );
    println!(
        "  lift from exact counts of every pair (the ceiling), same thresholds: precision@5 {:.2} | best seller in another's top 5: {:.0}%",
        hits_exact as f64 / planted,
        100.0 * intr_exact as f64 / other
    );
}
