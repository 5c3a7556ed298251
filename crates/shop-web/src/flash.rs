//! The flash sale over HTTP.
//!
//! - `GET /flash`: the sale page, a shell that is the same for every visitor (so the
//!   page cache keeps it): the items on sale with their titles; its script follows
//!   their live state through `GET /api/flash/events` and buys through
//!   `POST /api/flash/{id}/buy`.
//! - `GET /api/flash/{id}`: the sale's state (stock, window, price) from Redis
//!   (`shop_cache::flash_sale`), never the database; 404 when no sale is loaded.
//! - `GET /api/flash/events`: every loaded sale's state as server-sent events (a
//!   JSON array per event), pushed when any changes: one stream per page, however
//!   many items are on sale (a browser opens at most six connections to a site).
//!   Pages follow the process's [`Board`] (one Redis
//!   read per process every 200 ms, not one per page), so "sold out" reaches every
//!   open page within a second. Streams are bounded in number, per address and
//!   in lifetime ([`crate::event_streams`]).
//! - `GET /api/inventory/{id}`: the row cache's `inv:<id>` JSON, straight from
//!   Redis; 404 for an unknown or unscheduled row.
//! - `POST /api/flash/{id}/buy` with an `Idempotency-Key` header: one unit for the
//!   logged-in user. With `--flash-decider redis` (the default) Redis decides and
//!   only winners reach the database (`shop_app::flash::Buy`); with `database` every
//!   attempt is a database transaction (`shop_db::flash`, the baseline). The
//!   required custom header also keeps other sites from posting it: a cross-site
//!   request with it needs a CORS preflight, which this shop never grants.
//!   `?price_cents=N` is the sale price the buyer was shown (the sale page
//!   sends it): a sale whose price is another at the order's commit (started
//!   again with new terms meanwhile) sells nothing and answers 409
//!   `price_changed`. Without it the buy takes the sale's price at the commit.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::{Stream, StreamExt};
use shop_cache::flash_sale::Board;
use std::sync::Arc;

use crate::auth::{PeerAddr, client_address};
use crate::event_streams::{Refused, StreamSlot, Streams};
use shop_db::flash::BuyOutcome;
use shop_db::unix_now;
use tokio::sync::watch;

use shop_app::page_tags;

use crate::AppState;
use crate::error::WebError;
use crate::page_cache::{PageCacheConfig, PageTags, Pages};
use crate::request::{ItemPath, idempotency_key};
use crate::session::Session;
use crate::templates::{self, FlashPage, SaleItem};

/// The sale page's path (the page cache keys it by this path alone: it has no
/// query and varies on no header).
pub const SHELL_PATH: &str = shop_app::flash::SALE_PAGE_PATH;

/// The header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How often an idle event stream sends a comment, so proxies keep it open.
const EVENTS_KEEP_ALIVE: Duration = Duration::from_secs(15);
/// When a refused event stream may try again.
const EVENTS_RETRY: Duration = Duration::from_secs(5);

pub use shop_app::flash::FlashDecider;

/// The flash-sale routes; the shell page behind the page cache.
pub fn router(state: AppState) -> Router {
    let shell_cache = state.page_cache("flash", PageCacheConfig::new(Pages::Shared));
    Router::new()
        .route(SHELL_PATH, get(shell).layer(shell_cache))
        .route("/api/inventory/{id}", get(inventory))
        .route("/api/flash/{id}", get(sale_state))
        .route("/api/flash/events", get(sale_events))
        .route("/api/flash/{id}/buy", post(buy))
        .with_state(state)
}

async fn inventory(
    State(state): State<AppState>,
    ItemPath(id): ItemPath,
) -> Result<Response, WebError> {
    match state.rows.get(id).await? {
        Some(json) => Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response()),
        None => Err(WebError::not_found("no cached row for this item")),
    }
}

async fn sale_state(
    State(state): State<AppState>,
    ItemPath(id): ItemPath,
) -> Result<Response, WebError> {
    match state.flash.state(id).await? {
        Some(sale) => Ok(Json(sale).into_response()),
        None => Err(WebError::not_found("this item has no flash sale")),
    }
}

async fn sale_events(
    State(state): State<AppState>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, WebError> {
    let address = client_address(peer, &headers, state.config.trust_forwarded_for);
    let limits = state.config.event_streams;
    // The server's own bound is a 503 (it is busy); the address's is a 429
    // (the client holds too many), answered without a warning in the log.
    let slot = state
        .streams
        .admit(address, limits)
        .map_err(|why| match why {
            Refused::Full => WebError::busy(
                "streams_full",
                "this server holds all the live pages it can",
                EVENTS_RETRY,
            ),
            Refused::TooManyFromAddress => WebError::too_many(
                "too_many_streams",
                "too many live pages open from your address; close some",
                EVENTS_RETRY,
            ),
        })?;
    let events = board_events(state.sale_board.clone(), state.streams.clone(), slot)
        .take_until(tokio::time::sleep(limits.lifetime));
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(EVENTS_KEEP_ALIVE)))
}

/// The board now, then each time it changes; ends when the board closes (the
/// process is shutting down). Holds the stream's `slot` until it ends.
fn board_events(
    board: watch::Receiver<Board>,
    streams: Arc<Streams>,
    slot: StreamSlot,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(
        (board, None::<Arc<str>>, slot),
        move |(mut board, last, slot)| {
            let streams = streams.clone();
            async move {
                loop {
                    let data = streams.json(&board.borrow_and_update());
                    if last.as_deref() != Some(&*data) {
                        let event = Event::default().data(&*data);
                        return Some((Ok(event), (board, Some(data), slot)));
                    }
                    board.changed().await.ok()?;
                }
            }
        },
    )
}

async fn buy(
    State(state): State<AppState>,
    ItemPath(item): ItemPath,
    session: Session,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Response, WebError> {
    let key =
        idempotency_key(headers.get(IDEMPOTENCY_KEY).and_then(|v| v.to_str().ok()))?.to_owned();
    let shown = shown_price(uri.query())?;
    let user = session.require_user()?;
    // Per account, before anything is decided: a script looping buys with fresh
    // keys is slowed down (its refusals cost Redis a script call each).
    if let shop_cache::login_limit::Attempt::Refused { retry_after } =
        state.buy_limit.hit(&user.to_string()).await?
    {
        return Err(WebError::too_many_requests(
            "too many buys from this account; try again shortly",
            retry_after,
        ));
    }
    let outcome = state
        .buy()
        .run(&session.token, user, item, key, unix_now(), shown)
        .await?;
    let status = match outcome {
        BuyOutcome::Bought { .. } => StatusCode::OK,
        BuyOutcome::SoldOut
        | BuyOutcome::LimitReached
        | BuyOutcome::NotOnSale
        | BuyOutcome::Expired
        | BuyOutcome::PriceChanged => StatusCode::CONFLICT,
        BuyOutcome::UnknownItem => StatusCode::NOT_FOUND,
        BuyOutcome::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
    };
    state.metrics.flash_outcome(outcome.code());
    Ok((status, Json(outcome)).into_response())
}

/// The buy's `price_cents=` (the first; `None` without one): a price in an
/// item's range, or 400.
fn shown_price(query: Option<&str>) -> Result<Option<i64>, WebError> {
    let Some(text) = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(name, _)| name == "price_cents")
        .map(|(_, value)| value)
    else {
        return Ok(None);
    };
    match text.parse::<i64>() {
        Ok(cents) if (0..=shop_cache::domain::catalogue::MAX_PRICE_CENTS).contains(&cents) => {
            Ok(Some(cents))
        }
        _ => Err(WebError::bad_request(format!(
            "price_cents must be the sale price in cents you were shown, not {text:?}"
        ))),
    }
}

async fn shell(State(state): State<AppState>) -> Result<Response, WebError> {
    let now = unix_now();
    let ids = state.db.sale_items(now).await?;
    // The units each sale has as the page is drawn (a purge at its start draws
    // it anew), the full length of the page's stock bar.
    let units: std::collections::HashMap<_, _> = state
        .db
        .sales(now)
        .await?
        .into_iter()
        .map(|(id, sale)| (id, sale.stock))
        .collect();
    // Purged when a sale starts, or an item on it changes.
    let mut tags: Vec<_> = ids.iter().map(|id| page_tags::item(*id)).collect();
    tags.push(page_tags::sales());
    let items = state
        .db
        .items(&ids)
        .await?
        .into_iter()
        .filter(|item| !item.retired)
        .map(|item| SaleItem {
            demo: state.config.demo_sale == Some(item.id),
            id: item.id.get(),
            picture: crate::pictures::url(&item.category, item.id.get()),
            units: units.get(&item.id).copied().unwrap_or(0),
            title: item.title,
            price_cents: item.price_cents,
        })
        .collect();
    let mut resp = templates::render(&FlashPage { items })?.into_response();
    resp.extensions_mut().insert(PageTags(tags));
    Ok(resp)
}
