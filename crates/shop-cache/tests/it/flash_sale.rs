//! The flash sale's Redis side: exact counts under contention, the window, the
//! per-user limit, remembered answers, once-only settlement, the reconciler's
//! reads and correction, and the per-process board.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use shop_cache::domain::{BuyOutcome, ItemId, UserId};
use shop_cache::flash_sale::{
    FlashSales, Reservation, Reserve, SaleState, SaleTerms, SaleWatcher, Settlement,
};

use crate::both_layouts;

const NOW: i64 = 1_900_000_000;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn user(n: u64) -> UserId {
    UserId::new(n).unwrap()
}

fn terms(stock: i64) -> SaleTerms {
    SaleTerms {
        stock,
        price_cents: 500,
        start: NOW - 60,
        end: NOW + 3_600,
    }
}

fn reserved(answer: Reserve) -> Reservation {
    match answer {
        Reserve::Reserved(r) => r,
        other => panic!("expected a reservation, got {other:?}"),
    }
}

both_layouts! {
/// 300 buyers racing for 25 units over many connections: exactly 25 reserved, the
/// rest refused as sold out, the stock at 0, never below.
#[multi_thread]
async fn contention_reserves_exactly_the_stock(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    sales.open(item(1), &terms(25), NOW).await.unwrap();
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(fx.raw().await);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for u in 1..=300 {
        let sales = FlashSales::new(conns[u as usize % 8].clone(), fx.keys.clone());
        tasks.spawn(async move { sales.reserve(item(1), user(u), "k", 1, NOW, None).await.unwrap() });
    }
    let mut counts: HashMap<&str, u32> = HashMap::new();
    let mut numbers = Vec::new();
    while let Some(answer) = tasks.join_next().await {
        match answer.unwrap() {
            Reserve::Reserved(r) => {
                numbers.push(r.number);
                *counts.entry("reserved").or_default() += 1;
            }
            Reserve::Answered(BuyOutcome::SoldOut) => *counts.entry("sold_out").or_default() += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(counts["reserved"], 25);
    assert_eq!(counts["sold_out"], 275);
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=25).collect::<Vec<u64>>(), "each unit numbered once");
    let state = sales.state(item(1)).await.unwrap().unwrap();
    assert_eq!(state.stock, 0);
    let snap = sales.snapshot(item(1)).await.unwrap().unwrap();
    assert_eq!((snap.seq, snap.pending), (25, 25));
}

async fn the_window_and_a_missing_sale_refuse(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    assert_eq!(
        sales.reserve(item(2), user(1), "k", 1, NOW, None).await.unwrap(),
        Reserve::Answered(BuyOutcome::NotOnSale),
        "no sale loaded"
    );
    assert!(fx.all_keys().await.is_empty(), "a refusal for no sale writes nothing");
    sales.open(item(2), &terms(5), NOW).await.unwrap();
    let early = sales.reserve(item(2), user(1), "a", 1, NOW - 61, None).await.unwrap();
    assert_eq!(early, Reserve::Answered(BuyOutcome::NotOnSale));
    let at_end = sales.reserve(item(2), user(1), "b", 1, NOW + 3_600, None).await.unwrap();
    assert_eq!(at_end, Reserve::Answered(BuyOutcome::NotOnSale), "the end is exclusive");
    reserved(sales.reserve(item(2), user(1), "c", 1, NOW - 60, None).await.unwrap());
    assert_eq!(sales.state(item(2)).await.unwrap().unwrap().stock, 4);
    // A refusal is not remembered: the refused key, sent again once the sale is
    // open, is decided again (here: over the limit of one).
    assert_eq!(
        sales.reserve(item(2), user(1), "a", 1, NOW, None).await.unwrap(),
        Reserve::Answered(BuyOutcome::LimitReached)
    );
    reserved(sales.reserve(item(2), user(2), "a", 1, NOW, None).await.unwrap());
}

/// A buy at a price the sale no longer has is refused before it takes a unit:
/// the last unit stays for a buyer at the sale's price.
async fn a_buy_at_a_price_gone_holds_no_unit(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    sales.open(item(2), &terms(1), NOW).await.unwrap();
    for (who, shown) in [(1, 499), (2, 0), (3, 50_000)] {
        assert_eq!(
            sales.reserve(item(2), user(who), "k", 1, NOW, Some(shown)).await.unwrap(),
            Reserve::Answered(BuyOutcome::PriceChanged),
            "shown {shown} cents, the sale's price is 500"
        );
    }
    let state = sales.state(item(2)).await.unwrap().unwrap();
    assert_eq!(state.stock, 1, "no unit held by a refused price");
    // Refused, the key is not kept: the same key at the sale's price buys.
    reserved(sales.reserve(item(2), user(1), "k", 1, NOW, Some(500)).await.unwrap());
    assert_eq!(
        sales.reserve(item(2), user(4), "k", 1, NOW, None).await.unwrap(),
        Reserve::Answered(BuyOutcome::SoldOut)
    );
    // Sold out is said before a wrong price: no price would buy.
    assert_eq!(
        sales.reserve(item(2), user(5), "k", 1, NOW, Some(499)).await.unwrap(),
        Reserve::Answered(BuyOutcome::SoldOut)
    );
}

async fn the_per_user_limit_counts_reservations_and_releases(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    sales.open(item(3), &terms(10), NOW).await.unwrap();
    let first = reserved(sales.reserve(item(3), user(7), "1", 2, NOW, None).await.unwrap());
    let second = reserved(sales.reserve(item(3), user(7), "2", 2, NOW, None).await.unwrap());
    assert_eq!(
        sales.reserve(item(3), user(7), "3", 2, NOW, None).await.unwrap(),
        Reserve::Answered(BuyOutcome::LimitReached)
    );
    reserved(sales.reserve(item(3), user(8), "1", 2, NOW, None).await.unwrap());
    // One confirmed, one released: the user may buy one more.
    assert!(sales.settle(&first, Settlement::Confirm { order_id: 41 }).await.unwrap());
    assert!(sales
        .settle(&second, Settlement::Release(BuyOutcome::Expired))
        .await
        .unwrap());
    assert_eq!(sales.state(item(3)).await.unwrap().unwrap().stock, 8);
    reserved(sales.reserve(item(3), user(7), "4", 2, NOW, None).await.unwrap());
    assert_eq!(
        sales.reserve(item(3), user(7), "5", 2, NOW, None).await.unwrap(),
        Reserve::Answered(BuyOutcome::LimitReached)
    );
}

async fn answers_are_remembered_and_settling_happens_once(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    sales.open(item(4), &terms(3), NOW).await.unwrap();
    let r = reserved(sales.reserve(item(4), user(1), "k1", 1, NOW, None).await.unwrap());
    // A retry while the order is written: in flight, and no second unit.
    assert_eq!(
        sales.reserve(item(4), user(1), "k1", 1, NOW, None).await.unwrap(),
        Reserve::InFlight
    );
    assert_eq!(sales.answer(item(4), user(1), "k1").await.unwrap(), Some(Reserve::InFlight));
    assert!(sales.settle(&r, Settlement::Confirm { order_id: 99 }).await.unwrap());
    let bought = Reserve::Answered(BuyOutcome::Bought { order_id: 99 });
    assert_eq!(sales.reserve(item(4), user(1), "k1", 1, NOW, None).await.unwrap(), bought);
    // Settling again (the reconciler after the web server) changes nothing.
    assert!(!sales
        .settle(&r, Settlement::Release(BuyOutcome::Expired))
        .await
        .unwrap());
    assert_eq!(sales.reserve(item(4), user(1), "k1", 1, NOW, None).await.unwrap(), bought);
    assert_eq!(sales.state(item(4)).await.unwrap().unwrap().stock, 2);
    // A void takes the unit for good, a refusal gives it back; the database
    // recorded neither, and neither is remembered: asked again, decided again.
    let v = reserved(sales.reserve(item(4), user(2), "k", 1, NOW, None).await.unwrap());
    assert!(sales.settle(&v, Settlement::Void).await.unwrap());
    assert_eq!(sales.state(item(4)).await.unwrap().unwrap().stock, 1);
    assert_eq!(sales.answer(item(4), user(2), "k").await.unwrap(), None);
    let again = reserved(sales.reserve(item(4), user(2), "k", 1, NOW, None).await.unwrap());
    assert!(sales.settle(&again, Settlement::Refuse).await.unwrap());
    assert_eq!(sales.state(item(4)).await.unwrap().unwrap().stock, 1);
    assert_eq!(sales.answer(item(4), user(2), "k").await.unwrap(), None);
    // A release gives the unit back and keeps the database's answer.
    let g = reserved(sales.reserve(item(4), user(3), "k", 1, NOW, None).await.unwrap());
    assert!(sales.settle(&g, Settlement::Release(BuyOutcome::Expired)).await.unwrap());
    assert_eq!(sales.state(item(4)).await.unwrap().unwrap().stock, 1);
    assert_eq!(
        sales.reserve(item(4), user(3), "k", 1, NOW, None).await.unwrap(),
        Reserve::Answered(BuyOutcome::Expired)
    );
    // Keys are per user: another user's "k1" is a new attempt.
    reserved(sales.reserve(item(4), user(9), "k1", 1, NOW, None).await.unwrap());
}

async fn refusals_are_decided_again_not_remembered(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    sales.open(item(6), &terms(1), NOW).await.unwrap();
    let first = reserved(sales.reserve(item(6), user(1), "won", 1, NOW, None).await.unwrap());
    let answers = || async {
        let n: u64 = fx.raw().await.hlen(fx.keys.sale_answers(item(6))).await.unwrap();
        n
    };
    assert_eq!(answers().await, 1, "the reservation's answer");
    // A client looping buys with fresh keys: sold out, over the limit, before the
    // window. Each refused, none remembered.
    for n in 0..200 {
        let key = format!("fresh-{n}");
        let (who, at) = match n % 3 {
            0 => (user(2), NOW),
            1 => (user(1), NOW),
            _ => (user(3), NOW - 7_200),
        };
        let answer = sales.reserve(item(6), who, &key, 1, at, None).await.unwrap();
        assert!(matches!(answer, Reserve::Answered(_)), "{answer:?}");
    }
    assert_eq!(answers().await, 1, "refusals stored nothing");
    // Asked again, a refusal is decided again: a unit given back can be won with
    // the key that was refused.
    assert!(sales.settle(&first, Settlement::Release(BuyOutcome::Expired)).await.unwrap());
    assert_eq!(answers().await, 1, "the released reservation's answer");
    // A buyer whose reservations the database refuses (a price no longer the
    // sale's), each with a fresh key: the unit and the count come back each
    // time, and no answer stays.
    for n in 0..50 {
        let key = format!("wrong-price-{n}");
        let r = reserved(sales.reserve(item(6), user(4), &key, 1, NOW, None).await.unwrap());
        assert!(sales.settle(&r, Settlement::Refuse).await.unwrap());
    }
    assert_eq!(answers().await, 1, "refused reservations stored nothing");
    assert_eq!(sales.state(item(6)).await.unwrap().unwrap().stock, 1);
    reserved(sales.reserve(item(6), user(2), "fresh-0", 1, NOW, None).await.unwrap());
}

async fn overdue_reservations_and_the_quiet_correction(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone()).with_hold(Duration::from_secs(10));
    sales.open(item(5), &terms(4), NOW).await.unwrap();
    let a = reserved(sales.reserve(item(5), user(1), "ka", 1, NOW, None).await.unwrap());
    let b = reserved(sales.reserve(item(5), user(2), "k:b", 1, NOW + 5, None).await.unwrap());
    assert!(sales.overdue(item(5), NOW + 9, 10).await.unwrap().is_empty());
    let due = sales.overdue(item(5), NOW + 10, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].reservation.clone(), due[0].user, due[0].key.as_str()), (a.clone(), user(1), "ka"));
    let both = sales.overdue(item(5), NOW + 15, 10).await.unwrap();
    assert_eq!(both.len(), 2);
    assert_eq!(both[1].key, "k:b", "a key may hold the separator");
    assert_eq!(sales.overdue(item(5), NOW + 15, 1).await.unwrap().len(), 1);

    // No correction while anything is pending.
    let seen = sales.snapshot(item(5)).await.unwrap().unwrap();
    assert_eq!((seen.stock, seen.pending), (2, 2));
    assert!(!sales.correct(item(5), &seen, 3).await.unwrap());
    sales.settle(&a, Settlement::Confirm { order_id: 1 }).await.unwrap();
    sales.settle(&b, Settlement::Void).await.unwrap();
    let quiet = sales.snapshot(item(5)).await.unwrap().unwrap();
    assert_eq!(quiet.pending, 0);
    // A reservation after the snapshot voids it.
    reserved(sales.reserve(item(5), user(3), "k", 1, NOW, None).await.unwrap());
    assert!(!sales.correct(item(5), &quiet, 3).await.unwrap());
    assert_eq!(sales.state(item(5)).await.unwrap().unwrap().stock, 1);
    let c = sales.overdue(item(5), NOW + 100, 10).await.unwrap().remove(0);
    sales.settle(&c.reservation, Settlement::Confirm { order_id: 2 }).await.unwrap();
    let quiet = sales.snapshot(item(5)).await.unwrap().unwrap();
    assert!(sales.correct(item(5), &quiet, 0).await.unwrap());
    assert_eq!(sales.state(item(5)).await.unwrap().unwrap().stock, 0);
    assert!(!sales.correct(item(5), &quiet, 0).await.unwrap(), "already equal");
}

async fn opening_again_changes_a_running_sale_replaces_an_ended_one_and_the_board_follows(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    let (watcher, mut board) = SaleWatcher::new(sales.clone());
    assert_eq!(watcher.step().await.unwrap(), 0);
    let now = shop_cache_now();
    let live = SaleTerms { start: now - 10, end: now + 600, ..terms(2) };
    sales.open(item(6), &live, now).await.unwrap();
    reserved(sales.reserve(item(6), user(1), "k", 1, now, None).await.unwrap());
    assert_eq!(watcher.step().await.unwrap(), 1);
    assert!(board.has_changed().unwrap());
    let shown = board.borrow_and_update().get(&item(6)).cloned();
    assert_eq!(
        shown,
        Some(SaleState { item_id: item(6), stock: 1, start: now - 10, end: now + 600, price_cents: 500 })
    );
    watcher.step().await.unwrap();
    assert!(!board.has_changed().unwrap(), "nothing changed, nothing published");
    // Loaded again while it runs: the same sale with new terms. The buyer's
    // reservation stays (its answer too) and counts toward the limit; the new
    // stock is what is left once it is ordered.
    let more = SaleTerms { stock: 7, price_cents: 400, ..live };
    assert!(sales.open(item(6), &more, now).await.unwrap(), "changed, not replaced");
    assert_eq!(sales.reserve(item(6), user(1), "k", 1, now, None).await.unwrap(), Reserve::InFlight);
    assert_eq!(
        sales.reserve(item(6), user(1), "k2", 1, now, None).await.unwrap(),
        Reserve::Answered(BuyOutcome::LimitReached)
    );
    let second = reserved(sales.reserve(item(6), user(2), "k", 1, now, None).await.unwrap());
    assert_eq!(second.number, 2, "reservations go on being numbered");
    watcher.step().await.unwrap();
    assert_eq!(
        board.borrow_and_update()[&item(6)],
        SaleState { item_id: item(6), stock: 5, start: now - 10, end: now + 600, price_cents: 400 }
    );
    // Loaded again after it ended: a new sale, earlier answers and buyers gone.
    let after = now + 600;
    let next = SaleTerms { start: after, end: after + 600, ..terms(3) };
    assert!(!sales.open(item(6), &next, after).await.unwrap(), "replaced");
    reserved(sales.reserve(item(6), user(1), "k", 1, after, None).await.unwrap());
    assert_eq!(sales.state(item(6)).await.unwrap().unwrap().stock, 2);
    // A sale long over leaves the board.
    let old = SaleTerms { start: now - 7_200, end: now - 3_600, ..terms(1) };
    sales.open(item(7), &old, now).await.unwrap();
    assert_eq!(watcher.step().await.unwrap(), 1);
    assert_eq!(board.borrow_and_update().keys().collect::<Vec<_>>(), [&item(6)]);
    drop(watcher);
    assert!(board.changed().await.is_err(), "a stopped watcher closes the board");
}
}

fn shop_cache_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

both_layouts! {
/// Ending a sale not begun yet leaves an empty window (its start is the end
/// too: pages would say "starts in ..." of a sale that never will), and the
/// list of sales has it as ended then, not at its old end.
async fn ending_a_coming_sale_leaves_an_empty_window(fx: Fixture) {
    let sales = FlashSales::new(fx.conn.clone(), fx.keys.clone());
    let coming = SaleTerms {
        start: NOW + 600,
        end: NOW + 3_600,
        ..terms(5)
    };
    sales.open(item(4), &coming, NOW).await.unwrap();
    assert_eq!(sales.listed(NOW).await.unwrap(), vec![item(4)]);
    assert!(sales.end(item(4), NOW).await.unwrap());
    let state = sales.state(item(4)).await.unwrap().unwrap();
    assert_eq!((state.start, state.end), (NOW, NOW));
    assert!(sales.listed(NOW).await.unwrap().is_empty());
    assert!(!sales.end(item(4), NOW).await.unwrap(), "nothing left to end");
}
}
