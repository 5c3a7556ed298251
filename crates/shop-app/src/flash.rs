//! A flash-sale buy: one unit for one user, at most once per idempotency key.
//!
//! Decided in Redis by default ([`FlashDecider::Redis`]): one script reserves a
//! unit or refuses (`shop_cache::flash_sale`), and only a reserved unit becomes an
//! order in the database (`shop_db::flash::Db::record_flash_win`); then the
//! reservation is settled in Redis. The buyer is told "bought" only once the order
//! is committed. If the order cannot be written, the reservation stays pending and
//! the answer is [`AppError::NotRecorded`] (503, saying when to ask again): the
//! reconciler settles the unit after the hold, by what the database then holds,
//! and a retry with the same key gets that answer (meanwhile
//! [`AppError::Pending`]). With [`FlashDecider::Database`] every attempt is one database
//! transaction (the older design, kept to measure against).

use std::time::Duration;

use shop_cache::domain::{ItemId, UserId};
use shop_cache::flash_sale::{FlashSales, Reserve, Settlement};
use shop_cache::session::SessionToken;
use shop_db::Db;
use shop_db::flash::{BuyOutcome, WinRecord};

use crate::AppError;
use crate::orders::OrderInsights;
use crate::page_tags;
use shop_page_cache::PageStore;

/// The sale page's path (the page cache keys it by this path alone: it has no
/// query and varies on no header). Starting a sale drops that cached page.
pub const SALE_PAGE_PATH: &str = "/flash";

/// How long a retry waits for the answer of an attempt with the same key that is
/// still writing its order, before answering [`AppError::Pending`].
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(1);

/// How often that wait looks for the answer.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(20);

/// Who decides a flash-sale buy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlashDecider {
    /// One Redis script per buy; only winners write to the database.
    #[default]
    Redis,
    /// One database transaction per buy (the design Redis replaced; kept to
    /// measure against).
    Database,
}

/// The stores a buy works on.
#[derive(Clone, Copy)]
pub struct Buy<'a> {
    /// Where orders are recorded.
    pub db: &'a Db,
    /// Where buys are decided and reservations settled.
    pub flash: &'a FlashSales,
    /// Where a bought unit's order is recorded for the insights.
    pub insights: OrderInsights<'a>,
    /// Who decides.
    pub decider: FlashDecider,
    /// Most units of one sale item per user.
    pub limit: i64,
    /// The cached pages: an item's page says whether it is in stock, so the buy
    /// of its last unit purges it.
    pub pages: &'a PageStore,
}

impl Buy<'_> {
    /// One unit of `item` for `user` (in session `token`) at time `now`, at most
    /// once per `key`, at the sale's price if it is `shown` (what the buyer saw;
    /// else [`BuyOutcome::PriceChanged`] and nothing bought). `None` agrees to
    /// the sale's price at the order's commit.
    pub async fn run(
        &self,
        token: &SessionToken,
        user: UserId,
        item: ItemId,
        key: String,
        now: i64,
        shown: Option<i64>,
    ) -> Result<BuyOutcome, AppError> {
        let outcome = match self.decider {
            FlashDecider::Redis => self.in_redis(user, item, key, now, shown).await?,
            FlashDecider::Database => {
                let limit = self.limit;
                self.db
                    .flash_buy(user, item, &key, limit, now, shown)
                    .await?
            }
        };
        if matches!(outcome, BuyOutcome::Bought { .. }) {
            self.insights.record(token, &[item]).await;
        }
        Ok(outcome)
    }

    async fn in_redis(
        &self,
        user: UserId,
        item: ItemId,
        key: String,
        now: i64,
        shown: Option<i64>,
    ) -> Result<BuyOutcome, AppError> {
        let limit = self.limit;
        let deadline = tokio::time::Instant::now() + IN_FLIGHT_WAIT;
        let reservation = loop {
            match self
                .flash
                .reserve(item, user, &key, limit, now, shown)
                .await?
            {
                Reserve::Answered(outcome) => return Ok(outcome),
                Reserve::Reserved(reservation) => break reservation,
                Reserve::InFlight => {
                    if let Some(outcome) = self.wait_for_answer(item, user, &key, deadline).await? {
                        return Ok(outcome);
                    }
                    // The attempt in flight was refused and forgotten: decide again.
                }
            }
        };
        // In a task of its own: a buyer who disconnects must not cut the order
        // off between the database's commit and the settlement.
        let (db, flash, pages) = (self.db.clone(), self.flash.clone(), self.pages.clone());
        let settled_within = self.flash.hold();
        let winner = tokio::spawn(async move {
            // A database error leaves the reservation pending: the reconciler
            // settles it after its deadline, by what the database then holds.
            // Whatever the error, the buy's outcome is not known yet.
            let recorded = match db
                .record_flash_win(user, item, &key, limit, now, shown)
                .await
            {
                Ok(recorded) => recorded,
                Err(error) => {
                    if error.is_unavailable() {
                        tracing::warn!(%error, "a flash-sale win was not recorded; the reconciler settles it");
                    } else {
                        tracing::error!(%error, "a flash-sale win was not recorded; the reconciler settles it");
                    }
                    return Err(AppError::NotRecorded { settled_within });
                }
            };
            let sold_out = matches!(recorded, WinRecord::Ordered { sold_out: true, .. });
            let (settlement, outcome) = match recorded {
                WinRecord::Ordered { order_id, .. } => (
                    Some(Settlement::Confirm { order_id }),
                    BuyOutcome::Bought { order_id },
                ),
                // The reconciler fenced the key off: it gives back (or gave back)
                // the reservation it found overdue. This one may be a later
                // attempt with the key (after a refusal, forgotten, lost the
                // race with the fence): its unit goes back now. Settling is once
                // per reservation, so doing it after the reconciler changes
                // nothing.
                WinRecord::Earlier(BuyOutcome::Expired) => (
                    Some(Settlement::Release(BuyOutcome::Expired)),
                    BuyOutcome::Expired,
                ),
                WinRecord::Earlier(earlier) => {
                    (Some(Settlement::Release(earlier.clone())), earlier)
                }
                WinRecord::Refused(BuyOutcome::SoldOut) => {
                    (Some(Settlement::Void), BuyOutcome::SoldOut)
                }
                WinRecord::Refused(refused) => (Some(Settlement::Refuse), refused),
            };
            if let Some(settlement) = settlement
                && let Err(error) = flash.settle(&reservation, settlement).await
            {
                // The order (if any) is recorded; the reconciler settles the rest.
                tracing::warn!(%error, "could not settle a flash-sale reservation; the reconciler will");
            }
            // The item's page said "In stock"; the order stands whatever happens
            // here (the sale page shows the live stock).
            if sold_out && let Err(error) = pages.purge(&[page_tags::item(item)]).await {
                tracing::warn!(%error, "could not purge the page of an item sold out");
            }
            Ok(outcome)
        });
        winner.await.map_err(|_| AppError::Pending)?
    }

    /// The answer of an earlier attempt with the same key that is still in flight,
    /// once it has one; `None` once it is settled without one (refused, and so
    /// forgotten: the caller decides again); [`AppError::Pending`] at `deadline`.
    async fn wait_for_answer(
        &self,
        item: ItemId,
        user: UserId,
        key: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Option<BuyOutcome>, AppError> {
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(IN_FLIGHT_POLL).await;
            match self.flash.answer(item, user, key).await? {
                Some(Reserve::Answered(outcome)) => return Ok(Some(outcome)),
                Some(Reserve::InFlight | Reserve::Reserved(_)) => {}
                None => return Ok(None),
            }
        }
        Err(AppError::Pending)
    }
}
