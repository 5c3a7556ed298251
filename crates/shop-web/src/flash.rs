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
//!   Pages follow the process's [`Board`](shop_cache::flash_sale::Board) (one Redis
//!   read per process every 200 ms, not one per page), so "sold out" reaches every
//!   open page within a second.
//! - `GET /api/inventory/{id}`: the row cache's `inv:<id>` JSON, straight from
//!   Redis; 404 for an unknown or unscheduled row.
//! - `POST /api/flash/{id}/buy` with an `Idempotency-Key` header: one unit for the
//!   logged-in user. With `--flash-decider redis` (the default) Redis decides and
//!   only winners reach the database ([`buy_in_redis`]); with `database` every
//!   attempt is a database transaction (`shop_db::flash`, the baseline). The
//!   required custom header also keeps other sites from posting it: a cross-site
//!   request with it needs a CORS preflight, which this shop never grants.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::Stream;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::flash_sale::{Board, Reserve, Settlement};
use shop_db::flash::{BuyOutcome, WinRecord};
use shop_db::unix_now;
use tokio::sync::watch;

use crate::AppState;
use crate::error::WebError;
use crate::page_cache::{PageCacheConfig, PageCacheLayer, Pages};
use crate::request::idempotency_key;
use crate::session::Session;
use crate::views::{self, FlashPage, SaleItem};

/// The sale page's path (the page cache keys it by this path alone: it has no
/// query and varies on no header).
pub const SHELL_PATH: &str = "/flash";

/// The header carrying the client's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How long a retry waits for the answer of an attempt with the same key that is
/// still writing its order, before answering 503 (try again).
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(1);

/// How often that wait looks for the answer.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(20);

/// How often an idle event stream sends a comment, so proxies keep it open.
const EVENTS_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Who decides a flash-sale buy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlashDecider {
    /// One Redis script per buy; only winners write to the database.
    #[default]
    Redis,
    /// One database transaction per buy (the design Redis replaced; kept to
    /// measure against).
    Database,
}

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
        .route("/api/flash/{id}", get(sale_state))
        .route("/api/flash/events", get(sale_events))
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

async fn sale_state(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, WebError> {
    let id = parse_item(&id)?;
    match state.flash.state(id).await? {
        Some(sale) => Ok(Json(sale).into_response()),
        None => Err(WebError::not_found("this item has no flash sale")),
    }
}

/// The board as one event's data: every loaded sale's state, by item.
fn event_data(board: &Board) -> String {
    let sales: Vec<_> = board.values().collect();
    serde_json::to_string(&sales).expect("sale states always serialize")
}

async fn sale_events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    Sse::new(board_events(state.sale_board.clone()))
        .keep_alive(KeepAlive::new().interval(EVENTS_KEEP_ALIVE))
}

/// The board now, then each time it changes; ends when the board closes (the
/// process is shutting down).
fn board_events(board: watch::Receiver<Board>) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(
        (board, None::<String>),
        move |(mut board, last)| async move {
            loop {
                let data = event_data(&board.borrow_and_update());
                if last.as_ref() != Some(&data) {
                    let event = Event::default().data(data.clone());
                    return Some((Ok(event), (board, Some(data))));
                }
                board.changed().await.ok()?;
            }
        },
    )
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
    let outcome = match state.config.flash_decider {
        FlashDecider::Redis => buy_in_redis(&state, user, item, key).await?,
        FlashDecider::Database => {
            state
                .db
                .flash_buy(user, item, &key, state.config.flash_limit, unix_now())
                .await?
        }
    };
    let status = match outcome {
        BuyOutcome::Bought { .. } => StatusCode::OK,
        BuyOutcome::SoldOut
        | BuyOutcome::LimitReached
        | BuyOutcome::NotOnSale
        | BuyOutcome::Expired => StatusCode::CONFLICT,
        BuyOutcome::UnknownItem => StatusCode::NOT_FOUND,
        BuyOutcome::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
    };
    state.metrics.flash_outcome(outcome.code());
    if matches!(outcome, BuyOutcome::Bought { .. }) {
        crate::api::record_order(&state, &session, &[item]).await;
    }
    Ok((status, Json(outcome)).into_response())
}

/// A buy decided by Redis (`shop_cache::flash_sale`): refusals and earlier answers
/// come from one script; a reserved unit becomes an order in the database and the
/// reservation is settled. The winner's part runs in its own task, so a client
/// that hangs up cannot stop it half-way (and if the process dies, the reconciler
/// settles the reservation).
async fn buy_in_redis(
    state: &AppState,
    user: UserId,
    item: ItemId,
    key: String,
) -> Result<BuyOutcome, WebError> {
    let now = unix_now();
    let limit = state.config.flash_limit;
    let reservation = match state.flash.reserve(item, user, &key, limit, now).await? {
        Reserve::Answered(outcome) => return Ok(outcome),
        Reserve::InFlight => return wait_for_answer(state, item, user, &key).await,
        Reserve::Reserved(reservation) => reservation,
    };
    let state = state.clone();
    let winner = tokio::spawn(async move {
        // A database error leaves the reservation pending: the reconciler settles it
        // after its deadline, by what the database then holds. Whatever the error,
        // the buy's outcome is not known yet: 503, and a retry with the same key
        // gets the settled answer.
        let recorded = match state
            .db
            .record_flash_win(user, item, &key, limit, now)
            .await
        {
            Ok(recorded) => recorded,
            Err(error) => {
                tracing::warn!(%error, "a flash-sale win was not recorded; the reconciler settles it");
                return Err(WebError::in_progress());
            }
        };
        let (settlement, outcome) = match recorded {
            WinRecord::Ordered { order_id } => (
                Some(Settlement::Confirm { order_id }),
                BuyOutcome::Bought { order_id },
            ),
            // The reconciler gave the unit back already.
            WinRecord::Earlier(BuyOutcome::Expired) => (None, BuyOutcome::Expired),
            WinRecord::Earlier(earlier) => (Some(Settlement::Release(earlier.clone())), earlier),
            WinRecord::Refused(BuyOutcome::SoldOut) => (
                Some(Settlement::Void(BuyOutcome::SoldOut)),
                BuyOutcome::SoldOut,
            ),
            WinRecord::Refused(refused) => (Some(Settlement::Release(refused.clone())), refused),
        };
        if let Some(settlement) = settlement
            && let Err(error) = state.flash.settle(&reservation, settlement).await
        {
            // The order (if any) is recorded; the reconciler settles the rest.
            tracing::warn!(%error, "could not settle a flash-sale reservation; the reconciler will");
        }
        Ok::<_, WebError>(outcome)
    });
    winner.await.map_err(|_| WebError::internal())?
}

/// The answer of an earlier attempt with the same key that is still in flight,
/// once it has one (or 503 after [`IN_FLIGHT_WAIT`]: the retry should come again).
async fn wait_for_answer(
    state: &AppState,
    item: ItemId,
    user: UserId,
    key: &str,
) -> Result<BuyOutcome, WebError> {
    let deadline = tokio::time::Instant::now() + IN_FLIGHT_WAIT;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(IN_FLIGHT_POLL).await;
        if let Some(Reserve::Answered(outcome)) = state.flash.answer(item, user, key).await? {
            return Ok(outcome);
        }
    }
    Err(WebError::in_progress())
}

async fn shell(State(state): State<AppState>) -> Result<Response, WebError> {
    let ids = state.db.sale_items(unix_now()).await?;
    let items = state
        .db
        .items(&ids)
        .await?
        .into_iter()
        .map(|item| SaleItem {
            demo: state.config.demo_sale == Some(item.id),
            id: item.id.get(),
            title: item.title,
            price_cents: item.price_cents,
        })
        .collect();
    Ok(views::render(&FlashPage { items })?.into_response())
}
