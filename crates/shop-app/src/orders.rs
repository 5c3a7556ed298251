//! Checkout: a cart becomes an order in the database, if it and its prices are
//! what the shopper confirmed; then the lines ordered leave the cart and the order
//! is recorded for the shopper insights.
//!
//! The order is committed before anything else happens, and the answer "placed"
//! comes only from that commit (`shop_db::orders`). Emptying the cart and the
//! insights may fail afterwards (Redis down) without losing anything: a retry with
//! the same idempotency key returns the same order, and insights are a statistic
//! (a failure is logged and counted, never the order's).
//!
//! The lines ordered never stay in the cart to be ordered again: the order is
//! committed as not taken yet (`orders.cart_taken`), and its lines leave the
//! cart once per order ([`Carts::take_order`]). Until the order is marked
//! taken its take is done again (by the next checkout of its shopper, before
//! the cart is read, and by the workers' sweep, [`CartTakes`], every second):
//! a take that failed (Redis away, the server gone) or that Redis lost (a
//! crash before its append-only file was written, a failover before the
//! replica had it) is done then. The sweep marks an order taken once it is
//! [`TAKE_AGAIN_FOR`] old, in one write for many orders; a checkout writes
//! nothing but its order. A Redis restored from an older copy can still bring
//! back lines of orders marked taken before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shop_cache::cart::{CartOf, Carts};
use shop_cache::daemon::Daemon;
use shop_cache::domain::cart_version::CartVersion;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::insights::Insights;
use shop_cache::session::SessionToken;
use shop_db::Db;
use shop_db::orders::CheckoutOutcome;

use crate::AppError;
use crate::page_tags;
use shop_page_cache::PageStore;

/// Where a placed order is recorded for the insights, and the count of times that
/// failed (for `/metrics`).
#[derive(Clone, Copy)]
pub struct OrderInsights<'a> {
    /// Viewed-then-bought and also-bought.
    pub insights: &'a Insights,
    /// Failures to record an order's insights.
    pub errors: &'a AtomicU64,
}

impl OrderInsights<'_> {
    /// Records the order of `items` by the session `token`. Never fails the order:
    /// a failure is logged and counted.
    pub async fn record(&self, token: &SessionToken, items: &[ItemId]) {
        if let Err(error) = self.insights.record_order(token, items).await {
            self.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%error, "could not record the order's insights");
        }
    }
}

/// The stores a checkout works on.
#[derive(Clone, Copy)]
pub struct Checkout<'a> {
    /// Where the order is placed.
    pub db: &'a Db,
    /// The shopper's cart.
    pub carts: &'a Carts,
    /// Where the order's insights go.
    pub insights: OrderInsights<'a>,
    /// The cached pages: an item's page says whether it is in stock, so an order
    /// that takes its last units purges it.
    pub pages: &'a PageStore,
}

/// How long a checkout waits for another checkout of the same cart (a second
/// click, a second tab) to finish before answering [`AppError::CartBusy`]. A
/// checkout finishes even when its shopper goes away, so only one whose server
/// died holds a cart longer (until [`shop_cache::cart::CHECKOUT_HOLD`]).
pub const CHECKOUT_WAIT: Duration = Duration::from_secs(5);

/// How often that wait tries to hold the cart.
const CHECKOUT_POLL: Duration = Duration::from_millis(20);

impl Checkout<'_> {
    /// Places the order of `user`'s cart (from session `token`), at most once
    /// per `key`, if the cart and its prices at the commit are `shown` (what the
    /// shopper confirmed); on success removes the lines ordered from the cart and
    /// records the insights.
    ///
    /// One checkout of a cart at a time, so one cart is never ordered twice:
    /// another one meanwhile waits for it ([`CHECKOUT_WAIT`] at most, then
    /// [`AppError::CartBusy`]) and is then answered against the cart as that
    /// one left it: the same key (a second click) gets the same order, another
    /// key (a second tab) what changed. The order is placed in a task of its
    /// own: a shopper who goes away half-way (a dropped connection) cuts off
    /// neither the order nor the cart's release, so a retry is answered at once.
    pub async fn run(
        &self,
        token: &SessionToken,
        user: UserId,
        shown: &CartVersion,
        key: &str,
        now: i64,
    ) -> Result<CheckoutOutcome, AppError> {
        let deadline = tokio::time::Instant::now() + CHECKOUT_WAIT;
        loop {
            let (db, carts, pages) = (self.db.clone(), self.carts.clone(), self.pages.clone());
            let (shown, key) = (shown.clone(), key.to_owned());
            // Held and placed in a task of its own: once the cart is taken, a
            // shopper who goes away cuts off neither the order nor the release.
            let placing = tokio::spawn(async move {
                let Some(hold) = carts.hold_for_checkout(CartOf::Account(user)).await? else {
                    return Ok(None);
                };
                let placed = place(&db, &carts, &pages, user, &shown, &key, now).await;
                if let Err(error) = carts.release(hold).await {
                    // It expires on its own (`CHECKOUT_HOLD`).
                    tracing::warn!(%error, "could not let a cart go after its checkout");
                }
                placed.map(Some)
            });
            if let Some((outcome, ordered)) = placing.await.map_err(|_| AppError::Pending)?? {
                if let Some(items) = ordered {
                    self.insights.record(token, &items).await;
                }
                return Ok(outcome);
            }
            // Another checkout holds the cart: wait for it in this request (a
            // read at a time, so a shopper who goes away stops waiting and
            // leaves nothing behind), then try again.
            loop {
                if tokio::time::Instant::now() + CHECKOUT_POLL > deadline {
                    return Err(AppError::CartBusy);
                }
                tokio::time::sleep(CHECKOUT_POLL).await;
                if !self.carts.held_for_checkout(CartOf::Account(user)).await? {
                    break;
                }
            }
        }
    }
}

/// [`Checkout::run`] while the cart is held: the outcome, and the items of a
/// new order (for its insights).
async fn place(
    db: &Db,
    carts: &Carts,
    pages: &PageStore,
    user: UserId,
    shown: &CartVersion,
    key: &str,
    now: i64,
) -> Result<(CheckoutOutcome, Option<Vec<ItemId>>), AppError> {
    // An earlier order's lines that are still in the cart (its take failed)
    // leave it first: they are never ordered twice.
    if let Some(error) = take_untaken(db, carts, Some(user), 0, now).await?.failed {
        return Err(error.into());
    }
    let cart = carts.get(CartOf::Account(user)).await?;
    let lines: Vec<(ItemId, u32)> = cart.iter().map(|(id, q)| (*id, q.get())).collect();
    let outcome = db.checkout(user, &lines, shown, key, now).await?;
    // Only a new order: a replayed key answers the earlier order, and the cart
    // the shopper holds now (filled since) is theirs to keep, and bought by no
    // order. A new order holds exactly these lines (any missing one aborts it),
    // and only they leave the cart: one added or changed meanwhile stays.
    let CheckoutOutcome::Placed {
        order_id,
        new: true,
        ref sold_out,
        ..
    } = outcome
    else {
        return Ok((outcome, None));
    };
    sold_out_pages(pages, sold_out).await;
    // Marked taken later (`take_untaken`): no second write per order.
    if let Err(error) = carts.take_order(user, (order_id, now), &lines, now).await {
        tracing::warn!(
            %error,
            order_id,
            "order placed; its lines leave the cart at the next checkout or sweep"
        );
    }
    let items = lines.iter().map(|(id, _)| *id).collect();
    Ok((outcome, Some(items)))
}

/// Purges the pages of `items`, whose last units an order took: they said "In
/// stock". The order stands whatever happens here (a failure is logged; the page
/// says so until its time is up, and the checkout of a line with no stock left
/// answers with how many there are).
async fn sold_out_pages(pages: &PageStore, items: &[ItemId]) {
    if items.is_empty() {
        return;
    }
    let tags: Vec<_> = items.iter().map(|id| page_tags::item(*id)).collect();
    if let Err(error) = pages.purge(&tags).await {
        tracing::warn!(%error, "could not purge the pages of items sold out");
    }
}

/// How long after its commit an order's take is done again before it is marked
/// taken: longer than Redis can lose a write it confirmed (an append-only file
/// written every second, a replica a moment behind), and a few sweeps.
pub const TAKE_AGAIN_FOR: Duration = Duration::from_secs(5);

/// What [`take_untaken`] did.
#[derive(Debug, Default)]
pub struct Taken {
    /// Orders read (at most [`shop_db::orders::UNTAKEN_PER_READ`]).
    pub read: usize,
    /// The highest order id read (0: none).
    pub last: i64,
    /// The orders read that are [`TAKE_AGAIN_FOR`] old, their takes done:
    /// for the sweep to mark taken.
    pub old: Vec<i64>,
    /// The error of a take that failed (the others were done).
    pub failed: Option<shop_cache::CacheError>,
}

/// Takes out of their carts, each once, the lines of the orders not marked
/// taken yet (`user`'s, or anyone's; with ids above `after`), and says which
/// of them are [`TAKE_AGAIN_FOR`] old (marked by the sweep alone, so a
/// checkout never waits for a second write). A take that fails is reported in
/// [`Taken::failed`], the others done. An error: the database could not be
/// read.
pub async fn take_untaken(
    db: &Db,
    carts: &Carts,
    user: Option<UserId>,
    after: i64,
    now: i64,
) -> Result<Taken, AppError> {
    let untaken = db.untaken_orders(user, after).await?;
    let old_by = now - TAKE_AGAIN_FOR.as_secs() as i64;
    let mut old = Vec::new();
    let mut failed = None;
    for order in &untaken {
        match carts
            .take_order(
                order.user,
                (order.order_id, order.created_at),
                &order.lines,
                now,
            )
            .await
        {
            Ok(_) if order.created_at <= old_by => old.push(order.order_id),
            Ok(_) => {}
            Err(error) => failed = Some(error),
        }
    }
    Ok(Taken {
        read: untaken.len(),
        last: untaken.last().map_or(0, |order| order.order_id),
        old,
        failed,
    })
}

/// How often the sweep of [`CartTakes`] looks for orders not marked taken.
pub const CART_TAKES_EVERY: Duration = Duration::from_secs(1);

/// The workers' sweep of orders not marked taken ([`take_untaken`]): a take
/// that failed after the commit (Redis away, the server gone) is done, so a
/// shopper who does not check out again sees the lines gone too.
pub struct CartTakes {
    db: Db,
    carts: Carts,
    /// The last order id read; the next step reads on from it, so orders whose
    /// takes keep failing (their Redis node down) hold back no others.
    after: i64,
}

impl CartTakes {
    /// Sweeps the orders of `db` and the carts of `carts`.
    pub fn new(db: Db, carts: Carts) -> Self {
        Self {
            db,
            carts,
            after: 0,
        }
    }

    /// One sweep at `now` (unix seconds): [`take_untaken`] for anyone's orders
    /// after the last read (from the first again once none are left), then
    /// the old ones marked taken, in one write (none when there are none). A
    /// take that failed is the step's error, the others marked and the cursor
    /// moved on all the same.
    pub async fn step(&mut self, now: i64) -> Result<Taken, AppError> {
        let mut taken = take_untaken(&self.db, &self.carts, None, self.after, now).await?;
        self.after = if taken.read < shop_db::orders::UNTAKEN_PER_READ {
            0
        } else {
            taken.last
        };
        self.db.mark_cart_taken(&taken.old).await?;
        match taken.failed.take() {
            Some(error) => Err(error.into()),
            None => Ok(taken),
        }
    }
}

impl Daemon for CartTakes {
    const NAME: &'static str = "cart takes";
    type Error = AppError;

    async fn tick(&mut self) -> Result<Duration, AppError> {
        let taken = self.step(shop_db::unix_now()).await?;
        Ok(if taken.read >= shop_db::orders::UNTAKEN_PER_READ {
            Duration::ZERO
        } else {
            CART_TAKES_EVERY
        })
    }
}
