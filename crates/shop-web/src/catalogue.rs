//! The catalogue's own pages: the home page (departments, then product cards:
//! the most viewed items and featured ones, the first items of every
//! department, kept in the process by [`Featured`]) and the item pages, behind
//! the page cache.
//!
//! The home page is the same for every visitor but is not page-cached: its
//! most viewed items follow the view ranking as it is, read from Redis at every
//! home page. The page rendered from a ranking is kept in the process
//! ([`Featured`]) and served again while the ranking's order is the same and no
//! purge was seen (every catalogue change purges), so a busy home page reads
//! the ranking and nothing else: no database, no render.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use shop_cache::domain::ItemId;
use shop_page_cache::{PageTier, PurgesSeen};

use crate::AppState;
use crate::error::{Cause, WebError};
use crate::page_cache::{self, PageCacheConfig};
use crate::purged_copy::Stamp;
use crate::request::{BadRequest, ItemPath};
use crate::templates::{self, CategoryLink, HomePage, ItemPage, ItemView, SaleNotice};

/// How many of the most viewed items the home page shows.
const MOST_VIEWED: u64 = 12;

/// How many featured items the home page shows (a few of every department).
const FEATURED: u32 = 16;

/// The home page and the item pages (behind the page cache).
pub fn router(state: AppState) -> Router {
    let item_cache = state.page_cache("item", PageCacheConfig::new(page_cache::ITEMS));
    let budget = axum::middleware::from_fn_with_state(state.clone(), crate::uncached::budget);
    Router::new()
        .route("/", get(home))
        .route("/items/{id}", get(item).layer(budget).layer(item_cache))
        .with_state(state)
}

async fn home(State(state): State<AppState>) -> Result<Response, WebError> {
    // The ranking lives in Redis; if it is unavailable, the page goes without it.
    let mut ids: Vec<ItemId> = match state.analytics.top(MOST_VIEWED).await {
        Ok(top) => top.into_iter().map(|(id, _)| id).collect(),
        Err(error) => {
            Cause::redis(
                &error,
                "no view ranking; the home page shows featured items only",
            )
            .log();
            Vec::new()
        }
    };
    let picks = state.featured.get(&state.db).await?;
    if let Some(page) = state.featured.page(&ids, &picks) {
        return Ok(Html(page).into_response());
    }
    let read = Stamp::take(&state.featured.purges);
    let ranked = ids.clone();
    let viewed = ids.len();
    let others: Vec<ItemId> = picks
        .ids
        .iter()
        .filter(|id| !ids.contains(id))
        .copied()
        .collect();
    ids.extend(others);
    // One read for both, at today's titles and prices.
    let by_id = state.db.items_by_id(&ids).await?;
    let shown = |ids: &[ItemId]| -> Vec<ItemView> {
        ids.iter()
            .filter_map(|id| by_id.get(id))
            .filter(|item| !item.retired)
            .map(ItemView::from)
            .collect()
    };
    let mut featured = shown(&ids[viewed..]);
    featured.truncate(FEATURED as usize);
    let page = HomePage {
        most_viewed: shown(&ids[..viewed]),
        featured,
        categories: CategoryLink::all(&picks.categories),
    };
    let Html(html) = templates::render(&page)?;
    let html = Bytes::from(html);
    state.featured.keep_page(ranked, &picks, read, html.clone());
    Ok(Html(html).into_response())
}

/// Which items the home page features (the first few of every department) and
/// the departments, kept in this process: read again after a purge is seen
/// (every catalogue change purges) and at least once a minute, not at every
/// home page (a read per department). The items themselves are read at each
/// page, so a title or price shows as it is.
pub struct Featured {
    purges: PurgesSeen,
    kept: Mutex<Option<Arc<Picks>>>,
    /// The tier whose feed counts the purges: a page is kept only while it is
    /// trusted to have heard every one (see [`PageTier::is_trusted`]).
    tier: Option<Arc<PageTier>>,
    page: Mutex<Option<HomeCopy>>,
}

/// A rendered home page, and what it was rendered from.
struct HomeCopy {
    /// The most viewed items, in the ranking's order.
    ranked: Vec<ItemId>,
    /// The picks it shows.
    picks: Arc<Picks>,
    /// The purge count before its items were read.
    read: Stamp,
    html: Bytes,
}

/// The featured items and the departments, as read at `read`.
struct Picks {
    ids: Vec<ItemId>,
    categories: Vec<String>,
    read: Stamp,
}

/// The longest the picks are kept (a backstop for purges missed).
const PICKS_MAX_AGE: Duration = Duration::from_secs(60);

impl Featured {
    /// Picks good until a purge `purges` counts; home pages kept only beside
    /// `tier` (whose feed hears the purges).
    pub fn new(purges: PurgesSeen, tier: Option<Arc<PageTier>>) -> Self {
        Self {
            purges,
            kept: Mutex::default(),
            tier,
            page: Mutex::default(),
        }
    }

    /// Whether a copy of a page can be trusted to be purged now.
    fn hears_purges(&self) -> bool {
        self.tier.as_ref().is_some_and(|tier| tier.is_trusted())
    }

    /// The home page kept for the most viewed items `ranked` and `picks`, if
    /// one is and no purge was seen since its items were read.
    fn page(&self, ranked: &[ItemId], picks: &Arc<Picks>) -> Option<Bytes> {
        if !self.hears_purges() {
            return None;
        }
        let page = self
            .page
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        page.as_ref()
            .filter(|page| {
                page.ranked == ranked
                    && Arc::ptr_eq(&page.picks, picks)
                    && page.read.good(&self.purges, PICKS_MAX_AGE)
            })
            .map(|page| page.html.clone())
    }

    /// Keeps `html`, the home page of `ranked` and `picks` whose items were
    /// read after `read`, unless a purge came since.
    fn keep_page(&self, ranked: Vec<ItemId>, picks: &Arc<Picks>, read: Stamp, html: Bytes) {
        if !self.hears_purges() || !read.good(&self.purges, PICKS_MAX_AGE) {
            return;
        }
        *self
            .page
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(HomeCopy {
            ranked,
            picks: picks.clone(),
            read,
            html,
        });
    }

    async fn get(&self, db: &shop_db::Db) -> Result<Arc<Picks>, WebError> {
        let kept = self.lock().clone();
        if let Some(picks) = kept
            && picks.read.good(&self.purges, PICKS_MAX_AGE)
        {
            return Ok(picks);
        }
        let read = Stamp::take(&self.purges);
        let categories = db.categories().await?;
        let each = FEATURED
            .div_ceil(categories.len().max(1) as u32)
            .clamp(1, 4);
        let mut ids = Vec::new();
        for category in categories.iter().take(FEATURED as usize) {
            let items = db.items_page(Some(category), None, each).await?;
            ids.extend(items.iter().map(|item| item.id));
        }
        let picks = Arc::new(Picks {
            ids,
            categories,
            read,
        });
        *self.lock() = Some(picks.clone());
        Ok(picks)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Picks>>> {
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

async fn item(
    State(state): State<AppState>,
    id: Result<ItemPath, BadRequest>,
) -> Result<Response, WebError> {
    // A path that names no item is a page that does not exist.
    let Ok(ItemPath(id)) = id else {
        return Err(WebError::not_found("there is no such item"));
    };
    let item = state
        .db
        .item(id)
        .await?
        .ok_or_else(|| WebError::not_found("there is no such item"))?;
    if item.retired {
        return Err(WebError::retired());
    }
    // Its insights travel with it (the same for every visitor, cached and purged
    // with it); without them (Redis failing) the page's script asks for them.
    let (insights, tags) = match crate::insights::of(&state, id).await {
        Ok((insights, tags)) => (Some(crate::insights::inline_json(&insights)), Some(tags)),
        Err(error) => {
            error.log_cause("insights unavailable; the item page goes without them");
            (None, None)
        }
    };
    // Out of stock only when its inventory says so (a flash sale sold it out);
    // an item whose sale runs or is coming says so and links the sale page.
    let row = state.db.inventory_row(id).await?;
    let in_stock = row.as_ref().is_none_or(|row| row.stock > 0);
    let sale = row.as_ref().and_then(|row| {
        let (price, start, end) = (row.sale_price_cents?, row.sale_start?, row.sale_end?);
        SaleNotice::new(price, start, end, shop_db::unix_now())
    });
    let page = ItemPage {
        item: ItemView::from(&item),
        category_href: CategoryLink::all(std::slice::from_ref(&item.category))
            .pop()
            .map(|link| link.href)
            .unwrap_or_default(),
        category: item.category.clone(),
        description: item.description.clone(),
        max_quantity: state.carts.max_quantity(),
        stock: if in_stock { "In stock" } else { "Out of stock" },
        stock_class: if in_stock { "in-stock" } else { "out-of-stock" },
        picture_size: crate::pictures::SIZE,
        insights,
        sale,
    };
    let mut resp = templates::render(&page)?.into_response();
    if let Some(tags) = tags {
        resp.extensions_mut().insert(tags);
    }
    Ok(resp)
}
