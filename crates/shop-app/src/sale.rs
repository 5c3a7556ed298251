//! Starting a flash sale, and the database as the reconciler's [`Ledger`].
//!
//! Starting a sale writes its terms to the database (the record), loads them into
//! Redis (where buys are decided and the sale page's live stock comes from), keeps
//! the item's row cached for `/api/inventory`, and purges the cached sale page so
//! it lists the new item at once.

use shop_cache::domain::catalogue::MAX_PRICE_CENTS;
use shop_cache::domain::{InvalidInput, ItemId, UserId};
use shop_cache::flash_sale::{FlashSales, Ledger, LedgerError, SaleTerms};
use shop_cache::keys::Keys;
use shop_cache::{CacheError, RedisConn};
use shop_page_cache::PageStore;

use crate::page_tags;
use shop_cache::row_cache::RowCache;
use shop_db::Db;
pub use shop_db::inventory::SaleSet;
use shop_db::inventory::{MAX_STOCK, Sale};

use crate::AppError;

/// How often a sale item's cached row is refreshed by default, in seconds.
pub const DEFAULT_REFRESH: f64 = 1.0;
/// The longest sale `shop sale start` starts: a year, in minutes.
pub const MAX_MINUTES: i64 = 366 * 24 * 60;
/// The shortest and longest refresh of a sale item's cached row, in seconds
/// (shorter would have the row refresher read it without pause).
pub const REFRESH_RANGE: std::ops::RangeInclusive<f64> = 0.1..=86_400.0;

/// Where a sale is started: the database, and the Redis parts that show and
/// decide it.
pub struct SaleStores<'a> {
    /// The record.
    pub db: &'a Db,
    /// Where buys are decided.
    pub flash: &'a FlashSales,
    /// The item's cached row.
    pub rows: &'a RowCache,
    /// The cached sale page.
    pub pages: &'a PageStore,
}

/// The Redis parts of [`SaleStores`], made from the state Redis's connection (and
/// the cache Redis's, where the pages have one).
pub struct SaleParts {
    flash: FlashSales,
    rows: RowCache,
    pages: PageStore,
}

impl SaleParts {
    /// The parts over `conn`, the pages in `cache` when given (the same Redis the
    /// web servers keep their pages in, or a purge would miss them), with the
    /// default page-cache settings.
    pub fn new(conn: &RedisConn, cache: Option<RedisConn>, keys: &Keys) -> Self {
        Self {
            flash: FlashSales::new(conn.clone(), keys.clone()),
            rows: RowCache::new(conn.clone(), keys.clone()),
            pages: PageStore::in_cache_or_state(
                cache,
                conn.clone(),
                keys,
                shop_page_cache::DEFAULT_TTL,
            ),
        }
    }

    /// These parts, their purges also sent to the edges in front.
    pub fn with_edges(mut self, edges: Option<shop_page_cache::EdgePurger>) -> Self {
        self.pages = self.pages.with_edges(edges);
        self
    }

    /// Waits for the edge purges sent again in the background (before a
    /// command exits).
    pub async fn settle_edges(&self) {
        self.pages.settle_edges().await;
    }

    /// Where buys are decided.
    pub fn flash(&self) -> &FlashSales {
        &self.flash
    }

    /// These parts with the database.
    pub fn stores<'a>(&'a self, db: &'a Db) -> SaleStores<'a> {
        SaleStores {
            db,
            flash: &self.flash,
            rows: &self.rows,
            pages: &self.pages,
        }
    }
}

/// Puts `item` on sale, caches its row every `refresh` seconds and purges the
/// cached sale page. A sale of the item that has not ended gets the new terms and
/// stays the same sale ([`SaleSet::Changed`]): what each account bought in it
/// still counts toward the per-account limit, and a buy's answer stays what it
/// was. Anything but [`SaleSet::Started`] or [`SaleSet::Changed`] (no such item,
/// or one no longer sold) changed nothing; neither did terms out of range
/// ([`InvalidInput::SaleTerms`]: see [`valid_terms`]), refused before anything is
/// written.
pub async fn start(
    stores: &SaleStores<'_>,
    item: ItemId,
    sale: Sale,
    refresh: f64,
) -> Result<SaleSet, AppError> {
    let now = shop_db::unix_now();
    if !valid_terms(&sale, refresh, now) {
        return Err(CacheError::Invalid(InvalidInput::SaleTerms).into());
    }
    let set = stores.db.set_sale(item, sale, now).await?;
    if !set.is_set() {
        return Ok(set);
    }
    stores.flash.open(item, &terms(&sale), now).await?;
    stores.rows.schedule(item, refresh).await?;
    stores
        .pages
        .purge(&[page_tags::sales(), page_tags::item(item)])
        .await?;
    Ok(set)
}

/// Ends `item`'s sale now, if it has not ended (running, or not begun yet):
/// in the database first (the record, which every order's commit checks), then
/// in Redis (buys refused as not on sale; reservations made settle as usual),
/// and purges the item's page and the sale page. Its units left stay the
/// item's stock. `false` if neither had a sale of it to end; run again after
/// an error, it finishes what is left.
pub async fn stop(stores: &SaleStores<'_>, item: ItemId) -> Result<bool, AppError> {
    let now = shop_db::unix_now();
    let in_db = stores.db.end_sale(item, now).await?;
    let in_redis = stores.flash.end(item, now).await?;
    stores
        .pages
        .purge(&[page_tags::sales(), page_tags::item(item)])
        .await?;
    Ok(in_db || in_redis)
}

/// [`start`] as a new sale whatever ran before: a sale of `item` that has not
/// ended is ended first (a sale that ended a minute ago replaces it), so every
/// account may buy up to the limit again, as a load generator's next run needs.
pub async fn start_anew(
    stores: &SaleStores<'_>,
    item: ItemId,
    sale: Sale,
    refresh: f64,
) -> Result<SaleSet, AppError> {
    let now = shop_db::unix_now();
    let ended = Sale {
        start: now - 120,
        end: now - 60,
        ..sale
    };
    let set = start(stores, item, ended, refresh).await?;
    if !set.is_set() {
        return Ok(set);
    }
    start(stores, item, sale, refresh).await
}

/// Whether a sale's terms are ones [`start`] starts at `now` (unix seconds): 0
/// to [`MAX_STOCK`] units, a price of an item's range ([`MAX_PRICE_CENTS`]), an end 1
/// minute to [`MAX_MINUTES`] after its start, both within [`MAX_MINUTES`] of
/// now, a refresh within [`REFRESH_RANGE`]. Past them a sale would be written
/// and then fail half-way (an expiry Redis refuses) or run as no sale (one
/// that ended before it began, a row refreshed without pause). A sale wholly
/// before or after now may be started (it sells nothing until its window).
pub fn valid_terms(sale: &Sale, refresh: f64, now: i64) -> bool {
    let most = MAX_MINUTES * 60;
    let near = |at: i64| at.checked_sub(now).is_some_and(|by| by.abs() <= most);
    let length = sale.end.checked_sub(sale.start);
    (0..=MAX_STOCK).contains(&sale.stock)
        && (0..=MAX_PRICE_CENTS).contains(&sale.price_cents)
        && length.is_some_and(|length| (60..=most).contains(&length))
        && near(sale.start)
        && near(sale.end)
        && REFRESH_RANGE.contains(&refresh)
}

/// The demo sale's units.
pub const DEMO_STOCK: i64 = 100;
/// How long the demo sale lasts, in seconds.
pub const DEMO_LENGTH: i64 = 24 * 3_600;

/// The item a demo sale is of: the catalogue's first item still sold (item 1 of
/// the demo catalogue), `None` in an empty catalogue.
pub async fn demo_item(db: &Db) -> Result<Option<ItemId>, AppError> {
    Ok(db
        .items_page(None, None, 1)
        .await?
        .first()
        .map(|item| item.id))
}

/// Starts the demo sale of `item` ([`DEMO_STOCK`] units at half its price, for
/// [`DEMO_LENGTH`]) unless a sale is running or coming: a demo shop's sale page
/// then has something live to buy, and a sale an operator started is never
/// replaced. `true` if it started one.
pub async fn start_demo(stores: &SaleStores<'_>, item: ItemId) -> Result<bool, AppError> {
    let now = shop_db::unix_now();
    if !stores.db.sales(now).await?.is_empty() {
        return Ok(false);
    }
    let Some(found) = stores.db.item(item).await? else {
        return Ok(false);
    };
    let sale = Sale {
        stock: DEMO_STOCK,
        price_cents: found.price_cents / 2,
        start: now,
        end: now + DEMO_LENGTH,
    };
    Ok(start(stores, item, sale, DEFAULT_REFRESH).await?.is_set())
}

fn terms(sale: &Sale) -> SaleTerms {
    SaleTerms {
        stock: sale.stock,
        price_cents: sale.price_cents,
        start: sale.start,
        end: sale.end,
    }
}

/// The database as the flash-sale reconciler's ledger.
#[derive(Clone)]
pub struct DbLedger(pub Db);

impl Ledger for DbLedger {
    async fn fence(
        &self,
        item: ItemId,
        user: UserId,
        key: &str,
    ) -> Result<Option<i64>, LedgerError> {
        Ok(self.0.fence_flash(user, item, key).await?)
    }

    async fn stock(&self, item: ItemId) -> Result<Option<i64>, LedgerError> {
        Ok(self.0.inventory_row(item).await?.map(|row| row.stock))
    }

    async fn sales(&self, since: i64) -> Result<Vec<(ItemId, SaleTerms)>, LedgerError> {
        Ok(self
            .0
            .sales(since)
            .await?
            .iter()
            .map(|(item, sale)| (*item, terms(sale)))
            .collect())
    }
}
