//! Which listing pages are worth keeping, told in memory: the items that end a
//! page of each listing (the whole catalogue's, each department's), read from the
//! database in one pass ([`shop_db::Db::page_ends`]) and kept in this process, so
//! telling whether `?after=<id>` is a page the "next" links lead to is a binary
//! search, not a count up to the item's position (which made a deep listing page
//! cost more the deeper it was: a crawler on `/items?after=99990` got 325 renders
//! a second of two cores).
//!
//! Kept per listing (bounded by the departments, which only the catalogue's
//! changes create), until a purge is seen ([`PurgesSeen`]: every catalogue change
//! purges) or for [`MAX_AGE`] at most; read again at most once per [`MIN_AGE`]
//! (a change seen within it keeps the old ends a moment: a page is then stored
//! or not by the old ends, one more or one fewer kept listing page, never an
//! unbounded number).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shop_cache::domain::ItemId;
use shop_db::{Db, DbError};
use shop_page_cache::PurgesSeen;

use crate::purged_copy::Stamp;

/// The shortest time between two reads of one listing's ends.
pub const MIN_AGE: Duration = Duration::from_secs(1);
/// The longest one listing's ends are kept (a backstop for purges missed).
pub const MAX_AGE: Duration = Duration::from_secs(60);

struct Ends {
    ids: Vec<ItemId>,
    read: Stamp,
}

/// The page ends of every listing this process served; see the module docs.
pub struct ListingEnds {
    page: u32,
    purges: PurgesSeen,
    listings: Mutex<HashMap<Option<String>, Arc<Ends>>>,
}

impl ListingEnds {
    /// Ends of pages of `page` items, good until a purge `purges` counts.
    pub fn new(page: u32, purges: PurgesSeen) -> Self {
        Self {
            page,
            purges,
            listings: Mutex::default(),
        }
    }

    /// Whether `after` ends a page of the listing of `category` (or the whole
    /// catalogue).
    pub async fn is_page_end(
        &self,
        db: &Db,
        category: Option<&str>,
        after: ItemId,
    ) -> Result<bool, DbError> {
        let key = category.map(str::to_owned);
        let kept = self.lock().get(&key).cloned();
        let ends = match kept {
            Some(ends) if self.fresh(&ends) => ends,
            _ => {
                let read = Stamp::take(&self.purges);
                let ends = Arc::new(Ends {
                    ids: db.page_ends(category, self.page).await?,
                    read,
                });
                self.lock().insert(key, ends.clone());
                ends
            }
        };
        Ok(ends.ids.binary_search(&after).is_ok())
    }

    fn fresh(&self, ends: &Ends) -> bool {
        ends.read.age() < MIN_AGE || ends.read.good(&self.purges, MAX_AGE)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Option<String>, Arc<Ends>>> {
        self.listings.lock().unwrap_or_else(|e| e.into_inner())
    }
}
