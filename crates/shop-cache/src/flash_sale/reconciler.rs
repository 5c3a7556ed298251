//! The reconciler: settles reservations whose orders are overdue, by what the
//! [`Ledger`] (the database) holds, and repairs Redis's sales from it.

use std::error::Error;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::CacheError;
use crate::daemon::Daemon;
use crate::domain::{BuyOutcome, ItemId, UserId};

use super::*;

/// How many overdue reservations the reconciler settles per sale and step.
pub const RECONCILE_BATCH: usize = 100;

/// How long the reconciler pauses when it found nothing to do.
pub const RECONCILE_INTERVAL: Duration = Duration::from_millis(500);

/// A failure of the ledger (the database), kept opaque here.
pub type LedgerError = Box<dyn Error + Send + Sync>;

/// What the reconciler asks the database. The binary implements it over its
/// database handle, so this crate does not depend on the SQL layer.
pub trait Ledger: Send + Sync {
    /// Did (`user`, `key`) become an order for `item`? If not, make sure it never
    /// will (fence it off), then answer `None`.
    fn fence(
        &self,
        item: ItemId,
        user: UserId,
        key: &str,
    ) -> impl Future<Output = Result<Option<i64>, LedgerError>> + Send;

    /// The items whose sales end after `since`, with the database's terms (its
    /// stock now, its window and price).
    fn sales(
        &self,
        since: i64,
    ) -> impl Future<Output = Result<Vec<(ItemId, SaleTerms)>, LedgerError>> + Send;

    /// The database's stock of `item` now (`None`: no such item).
    fn stock(&self, item: ItemId) -> impl Future<Output = Result<Option<i64>, LedgerError>> + Send;
}

/// What one reconciler step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Overdue reservations whose orders existed: confirmed.
    pub confirmed: u64,
    /// Overdue reservations without an order: their units are back on sale.
    pub released: u64,
    /// Sales whose Redis stock was set to the database's.
    pub corrected: u64,
    /// Sales missing from Redis, loaded again from the database.
    pub reloaded: u64,
}

/// The daemon that makes Redis and the database agree about every running sale
/// (see the module documentation). Safe to run in several processes: settling is
/// once-only and the correction re-checks what it saw.
pub struct Reconciler<L> {
    sales: FlashSales,
    ledger: L,
    totals: Arc<ReconcilerTotals>,
}

/// What a reconciler has done since it started, for `/metrics`.
#[derive(Debug, Default)]
pub struct ReconcilerTotals {
    /// Overdue reservations confirmed (their orders existed).
    pub confirmed: AtomicU64,
    /// Overdue reservations released (units back on sale).
    pub released: AtomicU64,
    /// Stock corrections to the database's figure.
    pub corrected: AtomicU64,
    /// Sales loaded again after Redis lost them.
    pub reloaded: AtomicU64,
}

impl ReconcilerTotals {
    fn add(&self, done: &Reconciled) {
        for (total, n) in [
            (&self.confirmed, done.confirmed),
            (&self.released, done.released),
            (&self.corrected, done.corrected),
            (&self.reloaded, done.reloaded),
        ] {
            total.fetch_add(n, Ordering::Relaxed);
        }
    }
}

impl<L: Ledger> Reconciler<L> {
    /// A reconciler of `sales` against `ledger`.
    pub fn new(sales: FlashSales, ledger: L) -> Self {
        Self {
            sales,
            ledger,
            totals: Arc::default(),
        }
    }

    /// Its running totals (shared: they keep counting after the reconciler is
    /// handed to the daemon loop).
    pub fn totals(&self) -> Arc<ReconcilerTotals> {
        self.totals.clone()
    }

    /// One pass over every sale the database has running (or ended within the last
    /// [`RETAIN_AFTER_END`]).
    pub async fn step(&self) -> Result<Reconciled, CacheError> {
        let now = crate::clock::unix_now() as i64;
        let mut done = Reconciled::default();
        let since = now - RETAIN_AFTER_END.as_secs() as i64;
        let sales = self.ledger.sales(since).await.map_err(ledger_failed)?;
        for (item, terms) in sales {
            for overdue in self.sales.overdue(item, now, RECONCILE_BATCH).await? {
                let order = self
                    .ledger
                    .fence(item, overdue.user, &overdue.key)
                    .await
                    .map_err(ledger_failed)?;
                let how = match order {
                    Some(order_id) => Settlement::Confirm { order_id },
                    None => Settlement::Release(BuyOutcome::Expired),
                };
                let confirmed = matches!(how, Settlement::Confirm { .. });
                if self.sales.settle(&overdue.reservation, how).await? {
                    if confirmed {
                        done.confirmed += 1;
                    } else {
                        done.released += 1;
                    }
                    tracing::info!(
                        item = %item,
                        reservation = overdue.reservation.number,
                        confirmed,
                        "settled an overdue flash-sale reservation"
                    );
                }
            }
            match self.sales.snapshot(item).await? {
                None if terms.end > now => {
                    self.sales.open(item, &terms, now).await?;
                    done.reloaded += 1;
                    tracing::warn!(item = %item, "flash sale missing from Redis; loaded it again");
                }
                // The database's stock is read after the snapshot: with nothing
                // pending then, every order Redis counted is committed, and the
                // correction applies only if no reservation came since. Only
                // while the sale runs: once it ended, the item's stock has the
                // units kept back for after it again (`held_stock`).
                Some(seen) if seen.pending == 0 && terms.end > now => {
                    let stock = self.ledger.stock(item).await.map_err(ledger_failed)?;
                    if let Some(stock) = stock.filter(|&s| s != seen.stock)
                        && self.sales.correct(item, &seen, stock).await?
                    {
                        done.corrected += 1;
                        tracing::info!(
                            item = %item,
                            redis = seen.stock,
                            database = stock,
                            "flash-sale stock set to the database's"
                        );
                    }
                }
                _ => {}
            }
        }
        self.totals.add(&done);
        Ok(done)
    }
}

/// A ledger failure: the daemon loop logs it and retries, like a Redis failure.
fn ledger_failed(source: LedgerError) -> CacheError {
    CacheError::Source {
        what: "the flash-sale ledger (database)",
        source,
    }
}

impl<L: Ledger> Daemon for Reconciler<L> {
    const NAME: &'static str = "flash-sale reconciler";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        let done = self.step().await?;
        Ok(if done.confirmed + done.released > 0 {
            Duration::ZERO
        } else {
            RECONCILE_INTERVAL
        })
    }
}
