//! The HTML pages that are not about the cart: home, item, login form, account.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Deserialize;
use shop_cache::domain::ItemId;
use shop_cache::session::SessionToken;

use crate::AppState;
use crate::error::WebError;
use crate::page_cache::{PageCacheConfig, PageCacheLayer};
use crate::session::Session;
use crate::views::{
    self, AccountPage, CategoryLink, HomePage, ItemPage, ItemView, LoginPage, OrderView,
};

/// How many items the home page lists.
const HOME_ITEMS: u64 = 24;

/// The page routes; item pages behind the page cache.
pub fn router(state: AppState) -> Router {
    let item_cache = PageCacheLayer::new(state.pages.clone(), PageCacheConfig::default());
    state
        .metrics
        .register_page_cache("item", item_cache.stats());
    Router::new()
        .route("/", get(home))
        .route("/items/{id}", get(item).layer(item_cache))
        .route("/login", get(login_form))
        .route("/account", get(account))
        .with_state(state)
}

async fn home(State(state): State<AppState>) -> Result<Response, WebError> {
    // The ranking lives in Redis; if it is unavailable, show the first items instead.
    let ids: Vec<ItemId> = match state.analytics.top(HOME_ITEMS).await {
        Ok(top) if !top.is_empty() => top.into_iter().map(|(id, _)| id).collect(),
        Ok(_) => Vec::new(),
        Err(error) => {
            tracing::warn!(%error, "no view ranking; listing the first items");
            (1..=HOME_ITEMS)
                .filter_map(|n| ItemId::new(n).ok())
                .collect()
        }
    };
    let items = state.db.items(&ids).await?;
    let page = HomePage {
        items: items.iter().map(ItemView::from).collect(),
        categories: CategoryLink::all(&state.db.categories().await?),
    };
    Ok(views::render(&page)?.into_response())
}

async fn item(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, WebError> {
    let id: ItemId = id
        .parse()
        .map_err(|_| WebError::not_found("there is no such item"))?;
    let item = state
        .db
        .item(id)
        .await?
        .ok_or_else(|| WebError::not_found("there is no such item"))?;
    let page = ItemPage {
        item: ItemView::from(&item),
        category: item.category.clone(),
        description: item.description.clone(),
        max_quantity: state.carts.max_quantity(),
    };
    Ok(views::render(&page)?.into_response())
}

/// The `next` parameter of the login flow.
#[derive(Debug, Deserialize)]
pub struct Next {
    next: Option<String>,
}

impl Next {
    /// The parameter as sent.
    pub fn next(&self) -> Option<&str> {
        self.next.as_deref()
    }
}

/// Checks where to go after logging in: a path on this site, or `/` when none is
/// given. Anything else is refused (a 400 before anything changes), not quietly
/// replaced: browsers strip tabs and newlines from URLs and read `\` as `/`, so
/// `/\t/evil.host/x` and `/\\evil.host` are other sites to a browser. Allowed: a
/// `/` not followed by `/` or `\`, then visible ASCII only (no control characters,
/// spaces, backslashes or non-ASCII, which would also make an invalid `Location`).
pub fn local_path(next: Option<&str>) -> Result<String, WebError> {
    let Some(next) = next.filter(|n| !n.is_empty()) else {
        return Ok("/".to_owned());
    };
    let bytes = next.as_bytes();
    let ok = bytes[0] == b'/'
        && !matches!(bytes.get(1), Some(b'/' | b'\\'))
        && bytes.len() <= 2_000
        && bytes.iter().all(|&b| b.is_ascii_graphic() && b != b'\\');
    if ok {
        Ok(next.to_owned())
    } else {
        Err(WebError::bad_request(
            "next must be a path on this site, like /cart",
        ))
    }
}

async fn login_form(Query(q): Query<Next>) -> Result<Response, WebError> {
    let page = LoginPage {
        next: local_path(q.next.as_deref())?,
        message: None,
        key: SessionToken::generate().expose().to_owned(),
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], views::render(&page)?).into_response())
}

async fn account(State(state): State<AppState>, session: Session) -> Result<Response, WebError> {
    let Some(user) = session.user else {
        return Ok(Redirect::to("/login?next=/account").into_response());
    };
    let name = state.db.user_name(user).await?.unwrap_or_default();
    let orders = state.db.orders_of(user, 50).await?;
    let page = AccountPage {
        name,
        orders: orders
            .into_iter()
            .map(|o| OrderView {
                id: o.id,
                kind: o.kind,
                units: o.units,
                total: views::money(o.total_cents),
            })
            .collect(),
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], views::render(&page)?).into_response())
}

#[cfg(test)]
mod tests {
    use super::local_path;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(local_path(Some("/cart")).unwrap(), "/cart");
        assert_eq!(local_path(Some("/account?x=1")).unwrap(), "/account?x=1");
        assert_eq!(local_path(Some("/a%2F%2Fb")).unwrap(), "/a%2F%2Fb");
        assert_eq!(local_path(Some("")).unwrap(), "/");
        assert_eq!(local_path(None).unwrap(), "/");
        for bad in [
            "//evil.example",
            "https://evil.example",
            "evil",
            "/\\evil",
            "\\/evil",
            "/\t/evil.host/x",
            "/\n/evil.host",
            "/x\ty",
            "/ /evil",
            "/caf\u{e9}",
            "/\u{7f}",
            "/a\\b",
        ] {
            assert!(local_path(Some(bad)).is_err(), "{bad:?}");
        }
    }
}
