//! The sale pages' live stock: one [`SaleWatcher`] per web process publishes a
//! [`Board`] the pages' event streams follow.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::CacheError;
use crate::daemon::Daemon;
use crate::domain::ItemId;

use super::*;

/// How often a web process reads the loaded sales for its pages: with the push to
/// the page, well inside the second in which "sold out" must reach every page.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// How long after its end a sale stays on the board (pages show it as ended).
pub const SHOWN_AFTER_END: Duration = Duration::from_secs(300);

/// Every loaded sale's state, by item, as one web process last read it.
pub type Board = Arc<BTreeMap<ItemId, SaleState>>;

/// The per-process reader behind the sale pages' live stock (see the module
/// documentation). Its [`watch`] channel closes when it stops, which ends the
/// pages' event streams, so a shutting-down server does not wait on them.
pub struct SaleWatcher {
    sales: FlashSales,
    board: watch::Sender<Board>,
}

impl SaleWatcher {
    /// A watcher of `sales` and the receiving end of its board.
    pub fn new(sales: FlashSales) -> (Self, watch::Receiver<Board>) {
        let (board, receiver) = watch::channel(Board::default());
        (Self { sales, board }, receiver)
    }

    /// Reads every listed sale once and publishes the board if it changed.
    /// Returns how many sales it holds.
    pub async fn step(&self) -> Result<usize, CacheError> {
        let since = crate::clock::unix_now() as i64 - SHOWN_AFTER_END.as_secs() as i64;
        let items = self.sales.listed(since).await?;
        let states = self.sales.states(&items).await?;
        let fresh: BTreeMap<ItemId, SaleState> = states
            .into_iter()
            .flatten()
            .map(|s| (s.item_id, s))
            .collect();
        let len = fresh.len();
        self.board.send_if_modified(|board| {
            if **board == fresh {
                return false;
            }
            *board = Arc::new(fresh);
            true
        });
        Ok(len)
    }
}

impl Daemon for SaleWatcher {
    const NAME: &'static str = "sale watcher";
    type Error = CacheError;

    async fn tick(&mut self) -> Result<Duration, CacheError> {
        self.step().await?;
        Ok(WATCH_INTERVAL)
    }
}
