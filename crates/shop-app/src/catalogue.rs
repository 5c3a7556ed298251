//! Changing the catalogue: add, edit, retire and import items. Each change is
//! committed to the database first; then every cached page that showed what
//! changed is purged ([`PageStore::purge`], on every web server at once), the
//! item's cached row (`inv:<id>`) is rewritten, and a retired item leaves the
//! view ranking and its flash sale ends (in the database within the retiring
//! transaction, in Redis after it). The change is reported done only once all of
//! that happened.
//!
//! What a change purges (the tags the pages carry, see `shop-web`'s listings):
//! - the item itself, whenever anything of it changed: its page, every listing
//!   page that shows it (or whose "next" link depends on it), the sale page;
//! - a department it enters (added, moved in, sold again): that department's
//!   listing pages, since it may now show on any of them;
//! - the whole catalogue's listing, when an item is added or sold again;
//! - every listing page's department list, when a department appears or goes.
//!
//! An item that only leaves a department (moved out, retired) is on exactly the
//! pages tagged with it, so nothing more is purged for it.
//!
//! If the purge fails (Redis down) after the commit, it is retried a few times;
//! then the change is committed but the answer is [`CatalogueError::NotPurged`],
//! which names the items so `shop items purge` can finish the job.

use std::collections::BTreeSet;
use std::time::Duration;

use shop_cache::CacheError;
use shop_cache::analytics::Analytics;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::{ItemEdit, ItemFields};
use shop_cache::flash_sale::FlashSales;
use shop_page_cache::{PageStore, PageTag};

use crate::page_tags;
use shop_cache::row_cache::RowCache;
use shop_db::Db;
use shop_db::catalogue::{AddOutcome, EditOutcome, ItemChange, RetiredInImport};
use shop_db::inventory::{StockChange, StockChanged};
use shop_db::items::Item;

use crate::AppError;

/// Why a catalogue change did not fully happen.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// No item has this id; nothing was written.
    #[error("there is no item {0}")]
    UnknownItem(ItemId),
    /// Another item has this id; nothing was written.
    #[error("item {0} already exists")]
    IdTaken(ItemId),
    /// No id was given and every id is taken; nothing was written.
    #[error("every item id (1 to {}) is taken: no item can be added", ItemId::MAX)]
    NoIdLeft,
    /// The item changed since the version the edit was made from; nothing was
    /// written.
    #[error(
        "item {} is at version {}, not the one this edit was made from: it changed since; nothing was saved",
        current.id,
        current.version
    )]
    Stale {
        /// The item as it is now.
        current: Box<Item>,
    },
    /// The item is retired (no longer sold): its stock stays; nothing was written.
    #[error("item {0} is retired: it is no longer sold, so its stock does not change")]
    NotSold(ItemId),
    /// The item's flash sale has not ended: its units are the sale's; nothing
    /// was written.
    #[error(
        "item {item} is in a flash sale until {}: its units are the sale's \
         (`shop sale start` changes them); nothing was changed",
        shop_cache::domain::when::Utc(*end)
    )]
    OnSale {
        /// The item.
        item: ItemId,
        /// When its sale ends, unix seconds.
        end: i64,
    },
    /// The edit would put the item's regular price below its flash sale's, and
    /// the sale has not ended; nothing was written.
    #[error(
        "item {item} is in a flash sale at {sale_cents} cents until {}: its regular price \
         cannot go below the sale's (a sale never charges more than the item costs); change \
         the sale first (`shop sale start`); nothing was saved",
        shop_cache::domain::when::Utc(*end)
    )]
    BelowSale {
        /// The item.
        item: ItemId,
        /// The sale's price, in cents.
        sale_cents: i64,
        /// When the sale ends, unix seconds.
        end: i64,
    },
    /// The stock change would leave fewer than 0 or more than
    /// [`shop_db::inventory::MAX_STOCK`] units; nothing was written.
    #[error(
        "item {item} has {before} units: that change would leave fewer than 0 or more than {} \
         units; nothing was changed",
        shop_db::inventory::MAX_STOCK
    )]
    StockOutOfRange {
        /// The item.
        item: ItemId,
        /// The units it has.
        before: i64,
    },
    /// The change is committed, but the cached pages showing these items could not
    /// be purged (Redis unreachable): they may show the old content until their
    /// TTL. `shop items purge` with these ids finishes the job.
    #[error(
        "saved, but the cached pages of {} item(s) could not be purged: {source}",
        items.len()
    )]
    NotPurged {
        /// The items whose pages may be stale.
        items: Vec<ItemId>,
        /// What Redis said.
        source: CacheError,
    },
    /// The database or Redis failed before the change was committed.
    #[error(transparent)]
    Failed(#[from] AppError),
}

impl From<shop_db::DbError> for CatalogueError {
    fn from(e: shop_db::DbError) -> Self {
        CatalogueError::Failed(e.into())
    }
}

/// How many times a purge is tried after its change committed, and the pause
/// after each failure.
const PURGE_TRIES: [Duration; 4] = [
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::ZERO,
];

/// What one change (or one chunk of an import) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Items added.
    pub added: Vec<ItemId>,
    /// Items whose fields (or retirement) changed.
    pub changed: Vec<ItemId>,
    /// Items written as they already were.
    pub unchanged: u64,
    /// Retired items an import's lines named and left retired
    /// ([`RetiredInImport::Keep`]).
    pub kept_retired: Vec<ItemId>,
    /// Cached pages purged.
    pub pages_purged: u64,
}

impl Applied {
    /// How many lines these counts are: written, or left as they were.
    pub fn lines(&self) -> usize {
        self.added.len() + self.changed.len() + self.unchanged as usize + self.kept_retired.len()
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: Applied) {
        self.added.extend(other.added);
        self.changed.extend(other.changed);
        self.unchanged += other.unchanged;
        self.kept_retired.extend(other.kept_retired);
        self.pages_purged += other.pages_purged;
    }
}

/// The stores a catalogue change works on.
#[derive(Clone, Copy)]
pub struct Catalogue<'a> {
    /// Where the catalogue is kept.
    pub db: &'a Db,
    /// The cached pages, purged after each change.
    pub pages: &'a PageStore,
    /// The cached rows (`inv:<id>`), rewritten after each change.
    pub rows: &'a RowCache,
    /// The view ranking a retired item leaves.
    pub ranking: &'a Analytics,
    /// Where a retired item's flash sale is ended.
    pub sales: &'a FlashSales,
}

impl Catalogue<'_> {
    /// Adds an item (under `id`, or the next free id) with `stock` units.
    pub async fn add(
        &self,
        id: Option<ItemId>,
        fields: &ItemFields,
        stock: i64,
    ) -> Result<Item, CatalogueError> {
        let departments = self.db.categories().await?;
        match self.db.add_item(id, fields, stock).await? {
            AddOutcome::IdTaken(id) => Err(CatalogueError::IdTaken(id)),
            AddOutcome::NoIdLeft => Err(CatalogueError::NoIdLeft),
            AddOutcome::Added(item) => {
                let change = ItemChange {
                    before: None,
                    after: item.clone(),
                };
                self.after_commit(&[change], &departments).await?;
                Ok(item)
            }
        }
    }

    /// Applies `edit` to item `id`, if it is still at `if_version` when one is
    /// given (else the later edit wins); returns the change (unchanged if the edit
    /// named the values it already had).
    pub async fn update(
        &self,
        id: ItemId,
        edit: &ItemEdit,
        if_version: Option<i64>,
    ) -> Result<Applied, CatalogueError> {
        let departments = self.db.categories().await?;
        let change = match self.db.update_item(id, edit, if_version).await? {
            EditOutcome::Applied(change) => change,
            EditOutcome::NoSuchItem => return Err(CatalogueError::UnknownItem(id)),
            EditOutcome::Stale { current } => {
                return Err(CatalogueError::Stale {
                    current: Box::new(current),
                });
            }
            EditOutcome::BelowSale { sale_cents, end } => {
                return Err(CatalogueError::BelowSale {
                    item: id,
                    sale_cents,
                    end,
                });
            }
        };
        self.after_commit(&[change], &departments).await
    }

    /// Retires item `id`: its page answers 410, it leaves every listing, search,
    /// the home page and the ranking; old orders keep it.
    ///
    /// It stops selling first: its sale ends in Redis before anything is purged,
    /// and whether or not the purge works after (the database refuses a sale's win
    /// for it meanwhile). Retiring it again, or `purge`, finishes what a retire
    /// left undone.
    pub async fn retire(&self, id: ItemId) -> Result<Applied, CatalogueError> {
        let departments = self.db.categories().await?;
        let change = self
            .db
            .retire_item(id, shop_db::unix_now())
            .await?
            .ok_or(CatalogueError::UnknownItem(id))?;
        let stopped = self.retired(id).await;
        let applied = self.after_commit(&[change], &departments).await?;
        stopped.map_err(|source| CatalogueError::NotPurged {
            items: vec![id],
            source,
        })?;
        Ok(applied)
    }

    /// Changes item `id`'s units (received, written off, or counted: see
    /// [`StockChange`]); returns its units before and after. Its page is purged
    /// when it goes out of stock or back in (the page says which, not how many),
    /// and its cached row is rewritten.
    pub async fn stock(
        &self,
        id: ItemId,
        change: StockChange,
    ) -> Result<(i64, i64), CatalogueError> {
        let (before, after) = match self
            .db
            .change_stock(id, change, shop_db::unix_now())
            .await?
        {
            StockChanged::Changed { before, after } => (before, after),
            StockChanged::NoSuchItem => return Err(CatalogueError::UnknownItem(id)),
            StockChanged::Retired => return Err(CatalogueError::NotSold(id)),
            StockChanged::OnSale { end } => return Err(CatalogueError::OnSale { item: id, end }),
            StockChanged::OutOfRange { before } => {
                return Err(CatalogueError::StockOutOfRange { item: id, before });
            }
        };
        if (before > 0) != (after > 0) {
            self.purge_tags(&[page_tags::item(id)], &[id]).await?;
        }
        self.refresh_row(id)
            .await
            .map_err(|source| CatalogueError::NotPurged {
                items: vec![id],
                source,
            })?;
        Ok((before, after))
    }

    /// Writes one chunk of an import (distinct ids, checked fields) and purges
    /// what it changed; a retired item is left retired unless `retired` says
    /// to sell it again ([`Db::import_items`]).
    pub async fn import_chunk(
        &self,
        lines: &[(ItemId, ItemFields, i64)],
        retired: RetiredInImport,
    ) -> Result<Applied, CatalogueError> {
        let departments = self.db.categories().await?;
        let imported = self.db.import_items(lines, retired).await?;
        let mut applied = self.after_commit(&imported.changes, &departments).await?;
        let kept = imported.kept_retired.len();
        applied.unchanged += (lines.len() - imported.changes.len() - kept) as u64;
        applied.kept_retired = imported.kept_retired;
        Ok(applied)
    }

    /// Purges every page a change to `items` could have made stale, whatever the
    /// change was: their own, their departments', the whole listing's and the
    /// department lists (after a purge that failed, or by hand).
    ///
    /// A retired item also stops selling (its sale ended in Redis, out of the
    /// ranking) first, in case its retire could not do that; an item sold has
    /// its views counted again, in case its being sold again could not.
    pub async fn purge(&self, items: &[ItemId]) -> Result<u64, CatalogueError> {
        let mut tags: BTreeSet<PageTag> = items.iter().map(|id| page_tags::item(*id)).collect();
        let mut stopped = Ok(());
        for item in self.db.items(items).await? {
            stopped = stopped.and(match item.retired {
                true => self.retired(item.id).await,
                // Sold: its views count (its being sold again may not have
                // reached the ranking).
                false => self.ranking.rank_again(item.id).await,
            });
            tags.insert(page_tags::department(&item.category));
        }
        tags.extend([
            page_tags::all_items(),
            page_tags::departments(),
            page_tags::sales(),
        ]);
        let tags: Vec<PageTag> = tags.into_iter().collect();
        let purged = self.purge_tags(&tags, items).await?;
        stopped.map_err(|source| CatalogueError::NotPurged {
            items: items.to_vec(),
            source,
        })?;
        Ok(purged)
    }

    /// Everything after the commit: purge, rows, ranking.
    async fn after_commit(
        &self,
        changes: &[ItemChange],
        departments_before: &[String],
    ) -> Result<Applied, CatalogueError> {
        let mut applied = Applied::default();
        let mut tags = BTreeSet::new();
        for change in changes {
            if !change.changed() {
                applied.unchanged += 1;
                continue;
            }
            let after = &change.after;
            match &change.before {
                None => applied.added.push(after.id),
                Some(_) => applied.changed.push(after.id),
            }
            tags.extend(tags_of(change));
        }
        let touched: Vec<ItemId> = applied
            .added
            .iter()
            .chain(&applied.changed)
            .copied()
            .collect();
        if touched.is_empty() {
            // The same values again (a resent form, a rerun command, maybe after a
            // purge that failed): purge the item's own pages anyway, which is cheap,
            // so sending a change again always finishes it.
            if let [change] = changes {
                let tags = [
                    page_tags::item(change.after.id),
                    page_tags::department(&change.after.category),
                ];
                applied.pages_purged = self.purge_tags(&tags, &[change.after.id]).await?;
            }
            return Ok(applied);
        }
        if self.db.categories().await? != departments_before {
            tags.insert(page_tags::departments());
        }
        let tags: Vec<PageTag> = tags.into_iter().collect();
        applied.pages_purged = self.purge_tags(&tags, &touched).await?;
        for change in changes.iter().filter(|c| c.changed()) {
            let id = change.after.id;
            let sold_again =
                change.before.as_ref().is_some_and(|b| b.retired) && !change.after.retired;
            let ranked = match sold_again {
                true => self.ranking.rank_again(id).await,
                false => Ok(()),
            };
            if let Err(source) = ranked.and(self.refresh_row(id).await) {
                return Err(CatalogueError::NotPurged {
                    items: touched,
                    source,
                });
            }
        }
        Ok(applied)
    }

    /// Purges `tags`, retrying a few times: the change is committed, so giving up
    /// early would leave old pages to be served.
    async fn purge_tags(&self, tags: &[PageTag], items: &[ItemId]) -> Result<u64, CatalogueError> {
        let mut last = None;
        for pause in PURGE_TRIES {
            match self.pages.purge(tags).await {
                Ok(n) => return Ok(n),
                Err(error) => {
                    tracing::warn!(%error, "purging changed pages failed; retrying");
                    last = Some(error);
                    tokio::time::sleep(pause).await;
                }
            }
        }
        Err(CatalogueError::NotPurged {
            items: items.to_vec(),
            source: last.expect("at least one try"),
        })
    }

    /// What a retired item leaves in Redis: a sale of it (the database ended the
    /// sale in the retiring transaction), ended first, and the ranking.
    async fn retired(&self, id: ItemId) -> Result<(), CacheError> {
        self.sales.end(id, shop_db::unix_now()).await?;
        self.ranking.forget(id).await
    }

    /// Rewrites the item's cached row, if it is cached.
    async fn refresh_row(&self, id: ItemId) -> Result<(), CacheError> {
        let json = match self.db.inventory_json(id).await {
            Ok(Some(json)) => json,
            Ok(None) => return Ok(()),
            // The row's refresher reads it again soon; the pages are what matter.
            Err(error) => {
                tracing::warn!(%error, item = %id, "could not read the changed row");
                return Ok(());
            }
        };
        self.rows.replace(id, &json).await.map(drop)
    }
}

/// The tags of the pages one change makes stale (see the module documentation).
pub fn tags_of(change: &ItemChange) -> Vec<PageTag> {
    let after = &change.after;
    let mut tags = vec![page_tags::item(after.id)];
    let entered = match &change.before {
        None => true,
        Some(before) => !after.retired && (before.retired || before.category != after.category),
    };
    if entered {
        tags.push(page_tags::department(&after.category));
    }
    let sold_again = change.before.as_ref().is_none_or(|b| b.retired) && !after.retired;
    if sold_again {
        tags.push(page_tags::all_items());
    }
    tags
}
