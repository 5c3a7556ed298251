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
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shop_cache::domain::ItemId;
use shop_db::flash::{BuyOutcome, MAX_KEY_LEN};
use shop_db::unix_now;

use crate::AppState;
use crate::error::WebError;
use crate::page_cache::{PageCacheConfig, PageCacheLayer, Pages};
use crate::session::Session;

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
        .route("/flash", get(shell).layer(shell_cache))
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
    let key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_LEN && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            WebError::bad_request(format!(
                "an Idempotency-Key header of 1 to {MAX_KEY_LEN} visible ASCII characters is required"
            ))
        })?
        .to_owned();
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
    Ok((status, Json(outcome)).into_response())
}

async fn shell(State(state): State<AppState>) -> Result<Html<String>, WebError> {
    let items = state.db.sale_items(unix_now()).await?;
    let mut rows = String::new();
    for id in &items {
        rows.push_str(&format!(
            "<li class=\"sale-item\" data-item=\"{id}\"><span class=\"title\">Item {id}</span> \
             <span class=\"price\"></span> <span class=\"stock\">loading…</span> \
             <span class=\"window\"></span> <button class=\"buy\" disabled>Buy</button> \
             <span class=\"result\"></span></li>\n"
        ));
    }
    if items.is_empty() {
        rows.push_str("<li>No sale right now.</li>\n");
    }
    Ok(Html(format!("{SHELL_HEAD}{rows}{SHELL_TAIL}")))
}

const SHELL_HEAD: &str = r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Flash sale · Fake Web Retailer</title>
<style>body{font-family:system-ui,sans-serif;max-width:48rem;margin:2rem auto;padding:0 1rem}
li{margin:.5rem 0}.stock{font-weight:bold}</style></head>
<body><h1>Flash sale</h1>
<ul id="sale">
"#;

const SHELL_TAIL: &str = r#"</ul>
<script>
// Everything per-item and live comes from the row cache, so this page is the same
// for everyone and can be cached whole.
const money = c => '$' + (c / 100).toFixed(2);
const when = s => new Date(s * 1000).toLocaleTimeString();
async function refresh(li) {
  const r = await fetch('/api/inventory/' + li.dataset.item);
  if (!r.ok) { li.querySelector('.stock').textContent = 'unavailable'; return; }
  const row = await r.json();
  const now = Date.now() / 1000;
  const open = row.sale_start <= now && now < row.sale_end;
  li.querySelector('.title').textContent = row.title;
  li.querySelector('.price').textContent = row.sale_price_cents != null
    ? money(row.sale_price_cents) + ' (was ' + money(row.price_cents) + ')' : money(row.price_cents);
  li.querySelector('.stock').textContent = row.stock > 0 ? row.stock + ' left' : 'sold out';
  li.querySelector('.window').textContent = row.sale_start
    ? (open ? 'ends ' + when(row.sale_end) : 'starts ' + when(row.sale_start)) : '';
  li.querySelector('.buy').disabled = !(open && row.stock > 0);
}
async function buy(li) {
  const key = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
  const r = await fetch('/api/flash/' + li.dataset.item + '/buy', {
    method: 'POST', headers: {'Idempotency-Key': key}});
  const body = await r.json();
  li.querySelector('.result').textContent = body.outcome || body.message;
  refresh(li);
}
for (const li of document.querySelectorAll('.sale-item')) {
  li.querySelector('.buy').addEventListener('click', () => buy(li));
  refresh(li);
  setInterval(() => refresh(li), 2000);
}
</script>
</body></html>
"#;
