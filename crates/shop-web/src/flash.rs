//! The flash sale over HTTP.
//!
//! - `GET /flash`: the sale page, a shell that is the same for every visitor (so the
//!   page cache keeps it); its script fills in stock, price and window from
//!   `GET /api/inventory/{id}` every two seconds and buys through
//!   `POST /api/flash/{id}/buy`.
//! - `GET /api/inventory/{id}`: the row cache's `inv:<id>` JSON, straight from
//!   Redis, never the database; 404 for an unknown or unscheduled row.
//! - `POST /api/flash/{id}/buy` with an `Idempotency-Key` header: one unit for the
//!   logged-in user; the decision is the database's (see `shop_db::flash`). The
//!   required custom header also keeps other sites from posting it: a cross-site
//!   request with it needs a CORS preflight, which this shop never grants.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shop_cache::domain::ItemId;
use shop_db::flash::BuyOutcome;
use shop_db::unix_now;

use crate::AppState;
use crate::error::{WebError, idempotency_key};
use crate::page_cache::{PageCacheConfig, PageCacheLayer, Pages};
use crate::session::Session;
use crate::views::{self, FlashPage};

/// The sale page's path (the page cache keys it by this path alone: it has no
/// query and varies on no header).
pub const SHELL_PATH: &str = "/flash";

/// The header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The flash-sale routes; the shell page behind the page cache.
pub fn router(state: AppState) -> Router {
    let shell_cache = PageCacheLayer::new(
        state.pages.clone(),
        PageCacheConfig {
            pages: Pages::Shared,
            ..PageCacheConfig::default()
        },
    );
    state
        .metrics
        .register_page_cache("flash", shell_cache.stats());
    Router::new()
        .route(SHELL_PATH, get(shell).layer(shell_cache))
        .route("/api/inventory/{id}", get(inventory))
        .route("/api/flash/{id}/buy", post(buy))
        .with_state(state)
}

fn parse_item(raw: &str) -> Result<ItemId, WebError> {
    raw.parse()
        .map_err(|_| WebError::bad_request("item id must be a positive whole number"))
}

async fn inventory(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, WebError> {
    let id = parse_item(&id)?;
    match state.rows.get(id).await? {
        Some(json) => Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response()),
        None => Err(WebError::not_found("no cached row for this item")),
    }
}

async fn buy(
    State(state): State<AppState>,
    Path(id): Path<String>,
    session: Session,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    let item = parse_item(&id)?;
    let key =
        idempotency_key(headers.get(IDEMPOTENCY_KEY).and_then(|v| v.to_str().ok()))?.to_owned();
    let user = session.require_user()?;
    let outcome = state
        .db
        .flash_buy(user, item, &key, state.config.flash_limit, unix_now())
        .await?;
    let status = match outcome {
        BuyOutcome::Bought { .. } => StatusCode::OK,
        BuyOutcome::SoldOut | BuyOutcome::LimitReached | BuyOutcome::NotOnSale => {
            StatusCode::CONFLICT
        }
        BuyOutcome::UnknownItem => StatusCode::NOT_FOUND,
        BuyOutcome::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
    };
    state.metrics.flash_outcome(outcome.code());
    if matches!(outcome, BuyOutcome::Bought { .. }) {
        crate::api::record_order(&state, &session, &[item]).await;
    }
    Ok((status, Json(outcome)).into_response())
}

async fn shell(State(state): State<AppState>) -> Result<Response, WebError> {
    let items = state.db.sale_items(unix_now()).await?;
    let page = FlashPage {
        items: items.iter().map(|id| id.get()).collect(),
    };
    Ok(views::render(&page)?.into_response())
}
