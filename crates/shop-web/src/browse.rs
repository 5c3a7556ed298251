//! Finding things without knowing their id: the catalogue page by page
//! (`/items`), one department at a time (`/c/{category}`), and full-text search
//! (`/search?q=`).
//!
//! Listings are keyset pages (`?after=<last id of the page before>`, see
//! [`shop_db::items`]), so page 1,000 costs what page 1 does. They are the same
//! for every visitor, so they sit behind the page cache (keyed by path and
//! `after` only). Search pages are not in the page cache: any text makes a new
//! page, and a cache anyone can fill with arbitrary keys is a memory leak with
//! extra steps; their results are kept in process instead, bounded, the popular
//! ones ([`crate::search_cache`]). Search reads the database's own full-text
//! index ([`shop_db::search`]); what a visitor types is cut into words there, so
//! any input is a search. A search the cache cannot answer, like every page
//! rendered behind the page cache, spends the client's uncached-work budget
//! ([`crate::uncached`]).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use shop_app::page_tags;
use shop_cache::domain::ItemId;
use shop_db::search::SearchWords;

use crate::AppState;
use crate::auth::PeerAddr;
use crate::error::WebError;
use crate::page_cache::{PageCacheConfig, PageTags, Pages};
use crate::templates::{self, ItemView, ListingPage, SearchPage, url_encode};

/// Items on a listing page.
pub const LISTING_PAGE: u32 = 24;
/// Results on a search page.
pub const SEARCH_PAGE: u32 = 20;
/// The last search page offered (deeper pages are 400: nobody reads them, and
/// each costs the database more than the one before).
pub const MAX_SEARCH_PAGE: u32 = 50;
/// Longest search text accepted, in characters.
pub const MAX_QUERY: usize = 1_000;
/// Longest department name in a URL.
const MAX_CATEGORY: usize = 100;

/// The browsing and search routes; listings behind the page cache.
pub fn router(state: AppState) -> Router {
    let listing_cache = state.page_cache(
        "listing",
        PageCacheConfig {
            params: vec!["after"],
            ..PageCacheConfig::new(Pages::Shared)
        },
    );
    let budget = axum::middleware::from_fn_with_state(state.clone(), crate::uncached::budget);
    // Outside the page cache, which keys a page by the decoded `after` (so it
    // would answer `after=%32%34` from page 24's entry): see [`parse_after`].
    let after = axum::middleware::from_fn(after_as_linked);
    Router::new()
        .route(
            "/items",
            get(all_items)
                .layer(budget.clone())
                .layer(listing_cache.clone())
                .layer(after.clone()),
        )
        .route(
            "/c/{category}",
            get(category)
                .layer(budget)
                .layer(listing_cache)
                .layer(after),
        )
        .route("/search", get(search))
        .with_state(state)
}

/// The path of `department`'s listing, as the shop's links spell it.
pub fn department_path(department: &str) -> String {
    format!("/c/{}", url_encode(department))
}

/// Whether `path`, as sent, is `department`'s listing: as the shop's links
/// spell it, or with the characters a path may hold plainly
/// ([`templates::url_encode_plain`]: `/c/Home%20&%20Garden`). Any other
/// spelling (`/c/%61udio` for `/c/audio`) is no department's: each spelling
/// would be a page of its own in the page cache (its key is the path as sent),
/// so a client could fill it with copies of one page (3 to the power of the
/// name's length of them), as item paths ([`crate::request::ItemPath`]) cannot
/// either.
fn is_department_path(path: &str, department: &str) -> bool {
    path.strip_prefix("/c/").is_some_and(|raw| {
        raw == url_encode(department) || raw == templates::url_encode_plain(department)
    })
}

/// A listing page's `after` (the last item of the page before): an item id
/// spelled as the shop's "next" links spell it (`after=24`), once, or none.
/// Any other spelling of a parameter that decodes to `after` (`after=%32%34`,
/// `%61fter=24`, `after=024`, an empty `after=`, `after` twice) is a 400: the
/// page cache keys a page by the decoded value, but an edge in front keys it
/// by its URL as sent, so each spelling would be a copy of its own there; and
/// a name the page cache decodes but the listing would not read would store
/// the first page under another page's key.
fn parse_after(query: Option<&str>) -> Result<Option<ItemId>, WebError> {
    let mut found = None;
    for pair in query.unwrap_or_default().split('&') {
        let decoded = form_urlencoded::parse(pair.as_bytes()).next();
        if decoded.is_none_or(|(name, _)| name != "after") {
            continue;
        }
        let id = match pair
            .strip_prefix("after=")
            .map(|raw| (raw, raw.parse::<ItemId>()))
        {
            Some((raw, Ok(id))) if found.is_none() && id.to_string() == raw => id,
            _ => return Err(bad_after()),
        };
        found = Some(id);
    }
    Ok(found)
}

/// Refuses a listing request whose `after` is not spelled as the links spell
/// it ([`parse_after`]), before the page cache can answer it.
async fn after_as_linked(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match parse_after(req.uri().query()) {
        Ok(_) => next.run(req).await,
        Err(error) => error.into_response(),
    }
}

fn bad_after() -> WebError {
    WebError::bad_request(
        "after must be an item id (a whole number from 1 to 999999999999999999, \
         written as the page's links write it), once",
    )
}

async fn all_items(State(state): State<AppState>, uri: Uri) -> Result<Response, WebError> {
    let after = parse_after(uri.query())?;
    listing(&state, None, after).await
}

async fn category(
    State(state): State<AppState>,
    Path(category): Path<String>,
    uri: Uri,
) -> Result<Response, WebError> {
    if category.is_empty()
        || category.chars().count() > MAX_CATEGORY
        || !is_department_path(uri.path(), &category)
    {
        return Err(WebError::not_found("there is no such department"));
    }
    let after = parse_after(uri.query())?;
    listing(&state, Some(&category), after).await
}

async fn listing(
    state: &AppState,
    category: Option<&str>,
    after: Option<ItemId>,
) -> Result<Response, WebError> {
    let mut items = state
        .db
        .items_page(category, after, LISTING_PAGE + 1)
        .await?;
    let departments = state.db.categories().await?;
    if let Some(category) = category
        && !departments.iter().any(|d| d == category)
    {
        return Err(WebError::not_found("there is no such department"));
    }
    // What the page shows, for purges: its items and the one after them (which
    // decides the "next" link), its department (an item entering it) or the whole
    // catalogue, and the department list beside it.
    let mut tags: Vec<_> = items.iter().map(|it| page_tags::item(it.id)).collect();
    tags.push(category.map_or_else(page_tags::all_items, page_tags::department));
    tags.push(page_tags::departments());
    let more = items.len() > LISTING_PAGE as usize;
    items.truncate(LISTING_PAGE as usize);
    let base = match category {
        Some(c) => department_path(c),
        None => "/items".to_owned(),
    };
    let page = ListingPage {
        heading: category.map_or_else(|| "All items".to_owned(), capitalised),
        categories: departments,
        current: category.map(str::to_owned),
        next: more.then(|| {
            let last = items.last().map_or(0, |it| it.id.get());
            format!("{base}?after={last}")
        }),
        first: after.is_some().then_some(base),
        items: items.iter().map(ItemView::from).collect(),
    };
    // Kept only where the "next" links lead: the first page, and pages after an
    // item that ends a page. Past the end, or after any other item (a crawler's
    // made-up `after`), the page is answered but not kept, so the number of
    // listing pages stored (and their tag index entries) stays one per page of
    // the catalogue, not one per item.
    let keep = match after {
        None => true,
        Some(_) if page.items.is_empty() => false,
        Some(after) => {
            state
                .listing_ends
                .is_page_end(&state.db, category, after)
                .await?
        }
    };
    let mut resp = templates::render(&page)?.into_response();
    if !keep {
        resp.headers_mut().insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static(crate::PERSONAL),
        );
    }
    resp.extensions_mut().insert(PageTags(tags));
    Ok(resp)
}

/// "kitchen" -> "Kitchen".
fn capitalised(s: &str) -> String {
    let mut chars = s.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

/// The query of a search page.
#[derive(Debug, Deserialize)]
pub struct SearchQuery {
    q: Option<String>,
    page: Option<String>,
}

async fn search(
    State(state): State<AppState>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    Query(q): Query<SearchQuery>,
) -> Result<Response, WebError> {
    let text = q.q.unwrap_or_default();
    if text.chars().count() > MAX_QUERY {
        return Err(WebError::bad_request(
            "search text is at most 1,000 characters",
        ));
    }
    let page: u32 = match q.page.as_deref() {
        None | Some("") => 1,
        Some(raw) => raw
            .parse()
            .ok()
            .filter(|p| (1..=MAX_SEARCH_PAGE).contains(p))
            .ok_or_else(|| WebError::bad_request("page must be a whole number from 1 to 50"))?,
    };
    let words = SearchWords::from_text(&text);
    let cache = state.search_cache.as_deref();
    let (items, cached) = match cache.and_then(|cache| cache.get(&words, page)) {
        Some(items) => (items, "HIT"),
        None => {
            if !words.is_empty() {
                crate::uncached::spend(&state, peer, &headers).await?;
            }
            let mark = cache.map(|cache| cache.mark());
            let items = Arc::new(
                state
                    .db
                    .search(&words, (page - 1) * SEARCH_PAGE, SEARCH_PAGE + 1)
                    .await?,
            );
            if let (Some(cache), Some(mark)) = (cache, mark) {
                cache.put(&words, page, items.clone(), mark);
            }
            (items, "MISS")
        }
    };
    let more = items.len() > SEARCH_PAGE as usize && page < MAX_SEARCH_PAGE;
    let items = &items[..items.len().min(SEARCH_PAGE as usize)];
    let link = |p: u32| format!("/search?q={}&page={p}", url_encode(&words.joined()));
    let view = SearchPage {
        q: text.trim().to_owned(),
        searched: !words.is_empty(),
        page,
        next: more.then(|| link(page + 1)),
        previous: (page > 1).then(|| link(page - 1)),
        items: items.iter().map(ItemView::from).collect(),
    };
    let mut resp = templates::render(&view)?.into_response();
    resp.headers_mut().insert(
        crate::page_cache::X_CACHE,
        axum::http::HeaderValue::from_static(cached),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_is_an_item_id_spelled_one_way_or_nothing() {
        assert_eq!(parse_after(None).unwrap(), None);
        assert_eq!(parse_after(Some("")).unwrap(), None);
        assert_eq!(parse_after(Some("x=1&y")).unwrap(), None);
        let after = |query: &str| parse_after(Some(query)).unwrap().unwrap().get();
        assert_eq!(after("after=24"), 24);
        assert_eq!(after("x=1&after=24&y=2"), 24);
        for bad in [
            "after=0",
            "after=-1",
            "after=x",
            "after=1.5",
            "after=99999999999999999999999",
            // The same page spelled otherwise: a copy of its own at an edge.
            "after=%32%34",
            "%61fter=24",
            "x=1&a%66ter=24",
            "after",
            "after=024",
            "after=+24",
            "after=",
            "after=24&after=24",
        ] {
            assert!(parse_after(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(capitalised("kitchen"), "Kitchen");
        assert_eq!(capitalised(""), "");
    }
}
