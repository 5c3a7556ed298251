//! The cart page, the cart form and checkout.
//!
//! A form POST answers with a redirect (303); the same POST with
//! `Accept: application/json` answers JSON. Checkout places an order only for the
//! cart its page showed, at the prices shown (the form's `cart_version`); when
//! the cart or a price changed since, it answers 409 and shows the cart again,
//! saying what changed, for the shopper to confirm. A count of 0 or less removes
//! the line (as in the book); with `add=1` (the item page's "Add to cart") the
//! count is added to the line's, 409 `line_full` when that passes the most a line
//! holds. Bad input (a count that is not a whole number or is above the maximum,
//! an unknown item, a new line for a full cart) is a 4xx and changes nothing.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde_json::json;
use shop_cache::CacheError;
use shop_cache::cart::{CartOf, LineChange};
use shop_cache::domain::cart_version::{CartChange, CartVersion};
use shop_cache::domain::{InvalidInput, ItemId};
use shop_cache::login_limit::Attempt;
use shop_cache::session::SessionToken;
use shop_db::inventory::Availability;
use shop_db::items::Item;
use shop_db::orders::CheckoutOutcome;

use crate::AppState;
use crate::auth::{PeerAddr, client_address};
use crate::error::{Cause, WebError};
use crate::request::{idempotency_key, log_in_first, wants_json};
use crate::session::Session;
use crate::templates::{self, CartLineView, CartPage, ItemView};

/// The cart routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/cart", get(show).post(update))
        .route("/checkout", post(checkout))
        .with_state(state)
}

/// `GET /cart`'s query.
#[derive(Debug, serde::Deserialize)]
struct ShowQuery {
    /// Lines of the guest's cart a login just left out (the login's redirect).
    left_out: Option<u32>,
    /// Units of the guest's cart a login just cut (the login's redirect).
    cut: Option<u32>,
}

async fn show(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<ShowQuery>,
) -> Result<Response, WebError> {
    let mut page = cart_page(&state, &session, Vec::new()).await?;
    // Said only to a logged-in shopper's full cart, as it is after such a
    // login, and of no more lines than a guest's cart holds: a link made up
    // elsewhere cannot tell a guest, or a shopper with room in the cart, that
    // lines were lost, nor name a number no login could leave out.
    let logged_in = session.user.is_some();
    let max_lines = state.carts.max_lines();
    let left_out = query
        .left_out
        .filter(|&n| {
            logged_in && (1..=max_lines).contains(&n) && page.lines.len() >= max_lines as usize
        })
        .map(|n| {
            let lines = if n == 1 { "line" } else { "lines" };
            format!(
                "{n} {lines} of the cart you filled before logging in did not fit: your \
                 account's cart holds at most {max_lines} lines, so {} left out.",
                if n == 1 { "it was" } else { "they were" }
            )
        });
    // The same for units: said only with lines at the most of one item, and of
    // no more than a login could cut into them (that most, per line).
    let most = state.carts.max_quantity();
    let full_lines = page
        .lines
        .iter()
        .filter(|line| line.quantity >= most)
        .count();
    let cut = query
        .cut
        .filter(|&n| logged_in && n >= 1 && u64::from(n) <= u64::from(most) * full_lines as u64)
        .map(|n| {
            let units = if n == 1 { "unit" } else { "units" };
            format!(
                "{n} {units} of the cart you filled before logging in did not fit: a line \
                 holds at most {most} of one item, so the units past that were not added."
            )
        });
    let said: Vec<String> = left_out.into_iter().chain(cut).collect();
    page.left_out = (!said.is_empty()).then(|| said.join(" "));
    Ok(no_store(StatusCode::OK, templates::render(&page)?))
}

/// The cart page at today's prices, with a fresh checkout key and the version of
/// what it shows for the checkout to confirm; `changes` says what changed since the
/// page the shopper confirmed, if that is why it is shown.
async fn cart_page(
    state: &AppState,
    session: &Session,
    changes: Vec<String>,
) -> Result<CartPage, WebError> {
    let cart = state.carts.get(cart_of(state, session).await?).await?;
    let ids: Vec<ItemId> = cart.iter().map(|(id, _)| *id).collect();
    let by_id = state.db.items_by_id(&ids).await?;
    let now = shop_db::unix_now();
    let availability = state.db.availability(&ids, now).await?;
    // The page is personal (never cached): it says who is logged in without
    // waiting for the script.
    let user_name = match session.known_user()? {
        Some(user) => state
            .user_names
            .name(&state.db, user)
            .await?
            .map(|name| name.to_string()),
        None => None,
    };
    let mut total = 0;
    let mut shown = Vec::with_capacity(cart.len());
    let lines = cart
        .iter()
        .filter_map(|(id, qty)| {
            let item = by_id.get(id)?;
            // At the item's price now; a retired item is shown, not counted.
            let line = item.shown_line(qty.get());
            let line_total = line.price_cents.unwrap_or(0) * i64::from(qty.get());
            total += line_total;
            shown.push(line);
            Some(CartLineView {
                item: ItemView::from(item),
                quantity: qty.get(),
                total: templates::money(line_total),
                available: !item.retired,
                note: line_note(qty.get(), availability.get(id), now),
            })
        })
        .collect();
    Ok(CartPage {
        lines,
        total: templates::money(total),
        // Unguessable and fresh per render: one checkout per cart page shown.
        checkout_key: SessionToken::generate().expose().to_owned(),
        cart_version: CartVersion::new(shown).to_string(),
        max_quantity: state.carts.max_quantity(),
        changes,
        left_out: None,
        user_name,
    })
}

/// What the cart page says under a line that checkout would refuse as it is
/// (the same rules as `Db::checkout`): an item whose flash sale runs or is
/// coming, one out of stock, or one with fewer units left than the line holds.
/// A cart is no reservation: the stock is what it is as the page is made.
fn line_note(quantity: u32, availability: Option<&Availability>, now: i64) -> Option<String> {
    let availability = availability?;
    if availability.on_sale(now) {
        return Some(
            "In a flash sale: until it ends it is sold only on the flash sale page. \
             Remove it to check out the rest."
                .to_owned(),
        );
    }
    match availability.stock {
        left if left <= 0 => Some("Out of stock: remove it to check out.".to_owned()),
        left if i64::from(quantity) > left => Some(format!(
            "Only {left} left: lower its quantity to check out."
        )),
        _ => None,
    }
}

/// A personal page: never stored by a cache.
fn no_store(status: StatusCode, body: impl IntoResponse) -> Response {
    (status, [(header::CACHE_CONTROL, crate::PERSONAL)], body).into_response()
}

/// What a change since the confirmed page means, in a sentence naming the item.
fn describe(change: &CartChange, titles: &HashMap<ItemId, Item>) -> String {
    let title = titles.get(&change.item).map_or_else(
        || format!("Item {}", change.item),
        |item| item.title.clone(),
    );
    let short = change.out_of_stock.then(|| match change.in_stock {
        Some(1) => format!("Only 1 of {title} is left: lower its quantity to check out."),
        Some(left) if left > 0 => {
            format!("Only {left} of {title} are left: lower its quantity to check out.")
        }
        _ => format!("{title} is out of stock: remove it to check out."),
    });
    if change.added {
        let quantity = change.now_quantity.unwrap_or(0);
        let added = match change.now_cents {
            Some(cents) => format!(
                "{title} was added to your cart since you saw it: {quantity} at {} each.",
                templates::money(cents)
            ),
            None => format!("{title} was added to your cart and is no longer available."),
        };
        return [Some(added), short]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
    }
    if change.removed {
        // Most often an order took it (another tab's, or this one's whose
        // answer was lost): say where that order would be.
        return format!(
            "{title} is no longer in your cart (if an order of yours took it, your account \
             page lists that order)."
        );
    }
    if change.retired {
        return format!("{title} is no longer available.");
    }
    let mut said: Vec<String> = short.into_iter().collect();
    match (change.was_cents, change.now_cents) {
        (Some(was), Some(now)) => {
            let way = if now > was { "up" } else { "down" };
            said.push(format!(
                "The price of {title} went {way} from {} to {}.",
                templates::money(was),
                templates::money(now)
            ));
        }
        (None, Some(now)) => said.push(format!(
            "{title} is available again, at {}.",
            templates::money(now)
        )),
        _ => {}
    }
    if let (Some(was), Some(now)) = (change.was_quantity, change.now_quantity) {
        said.push(format!(
            "The quantity of {title} changed from {was} to {now}."
        ));
    }
    said.join(" ")
}

async fn update(
    State(state): State<AppState>,
    session: Session,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    let item: ItemId = form
        .get("item")
        .ok_or_else(|| WebError::bad_request("which item? (the form needs an item)"))?
        .parse()
        .map_err(|_| WebError::bad_request(InvalidInput::ItemId.to_string()))?;
    let count: i64 = form
        .get("count")
        .ok_or_else(|| WebError::bad_request("how many? (the form needs a count)"))?
        .trim()
        .parse()
        .map_err(|_| WebError::bad_request("count must be a whole number"))?;
    // `add=1` (the item page's "Add to cart"): the count joins the line's.
    let add = match form.get("add").map(String::as_str) {
        None => false,
        Some("1") if count > 0 => true,
        Some("1") => return Err(CacheError::from(InvalidInput::QuantityTooSmall).into()),
        Some(_) => {
            return Err(WebError::bad_request(
                "add is 1 (add the count) or left out",
            ));
        }
    };
    if count > 0 {
        // The checks that cost no database read first: a flood refused by the
        // budget, or sending a bad quantity, costs Redis one call and no lookup.
        LineChange::from_count(count, state.carts.max_quantity()).map_err(CacheError::from)?;
        // Not an item whose sale runs or is coming, as the sale pages show it
        // (within a second): checkout is what decides.
        if let Some(sale) = state.sale_board.borrow().get(&item)
            && shop_db::unix_now() < sale.end
        {
            return Err(on_sale(item, false));
        }
        new_cart_allowed(&state, &session, peer, &headers).await?;
        match state.db.item(item).await? {
            None => return Err(WebError::not_found("there is no such item")),
            Some(found) if found.retired => {
                return Err(WebError::new(
                    StatusCode::CONFLICT,
                    "item_retired",
                    format!("item {item} is no longer available"),
                ));
            }
            Some(_) => {}
        }
    }
    let cart = cart_of(&state, &session).await?;
    if add {
        state.carts.add(cart.clone(), item, count).await?;
    } else {
        state.carts.set(cart.clone(), item, count).await?;
    }
    if wants_json(&headers) {
        let lines = state.carts.get(cart).await?;
        let lines: Vec<_> = lines
            .iter()
            .map(|(id, q)| json!({ "item": id.get(), "quantity": q.get() }))
            .collect();
        return Ok(Json(json!({ "cart": lines })).into_response());
    }
    Ok(Redirect::to("/cart").into_response())
}

/// The cart `session` means: the account's when logged in (after finishing a
/// merge of the session's own cart that its login left undone: Redis failed
/// between the steps; if it fails again, the next read tries again), else the
/// session's.
pub(crate) async fn cart_of(state: &AppState, session: &Session) -> Result<CartOf, WebError> {
    let user = session.known_user()?;
    if let Some(user) = user {
        finish_merge(state, &session.token, user, None).await;
    }
    Ok(CartOf::of(&session.token, user))
}

/// Merges into `user`'s cart what the session's own cart still holds (`read`,
/// when already read; else read now): a merge its login left undone. A failure
/// is logged, not the request's: the next cart read tries again.
pub(crate) async fn finish_merge(
    state: &AppState,
    token: &SessionToken,
    user: shop_cache::domain::UserId,
    read: Option<&[(ItemId, shop_cache::cart::Quantity)]>,
) {
    let merged = match read {
        Some([]) => return,
        Some(lines) => state.carts.merge_lines(token, user, lines).await,
        None => state.carts.merge_into_account(token, user).await,
    };
    if let Err(error) = merged {
        Cause::redis(&error, "a guest's cart could not join the account's yet").log();
    }
}

/// A first line in a cart of a session not logged in starts a cart the cleaner
/// keeps: one client address may start only so many a minute
/// ([`crate::WebConfig::cart_starts_per_minute`]); past it, 429 and nothing written.
async fn new_cart_allowed(
    state: &AppState,
    session: &Session,
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
) -> Result<(), WebError> {
    if session.known_user()?.is_some() || !state.carts.is_empty(&session.token).await? {
        return Ok(());
    }
    let Some(address) = client_address(peer, headers, state.config.trust_forwarded_for) else {
        return Ok(());
    };
    match state.cart_starts.hit(&address).await? {
        Attempt::Allowed => Ok(()),
        Attempt::Refused { retry_after } => Err(WebError::too_many_requests(
            "too many new carts from your address; try again shortly",
            retry_after,
        )),
    }
}

async fn checkout(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    let key = idempotency_key(form.get("key").map(String::as_str))?;
    // Without a version the shopper confirmed nothing: every line is news to them.
    let shown = match form.get("cart_version") {
        Some(text) => CartVersion::parse(text).map_err(|e| WebError::bad_request(e.to_string()))?,
        None => CartVersion::default(),
    };
    let Some(user) = session.known_user()? else {
        return Ok(log_in_first("/cart", &headers));
    };
    // Any merge a login left unfinished first: the account's cart is what is
    // ordered.
    cart_of(&state, &session).await?;
    let outcome = state
        .checkout()
        .run(&session.token, user, &shown, key, shop_db::unix_now())
        .await?;
    match outcome {
        CheckoutOutcome::Placed { order_id, new, .. } => {
            if wants_json(&headers) {
                return Ok(Json(outcome).into_response());
            }
            // A form sent again (a reload, a back button) is answered with the
            // order it placed then, and says so: nothing was ordered now, and
            // the cart as it is now was not ordered.
            let again = if new { "" } else { "&again=1" };
            Ok(Redirect::to(&format!("/account?placed={order_id}{again}")).into_response())
        }
        CheckoutOutcome::Changed { ref changes, .. } => {
            let ids: Vec<ItemId> = changes.iter().map(|c| c.item).collect();
            // Titles the database cannot give now leave the sentences naming
            // items by id: the 409 is what the buyer needs, not a 503.
            let titles = state.db.items_by_id(&ids).await.unwrap_or_default();
            let said: Vec<String> = changes.iter().map(|c| describe(c, &titles)).collect();
            if wants_json(&headers) {
                // What to do, said as the page says it: a line out of stock
                // needs a lower quantity before any version is confirmed.
                let mut body = json!(outcome);
                body["message"] = said.join(" ").into();
                return Ok(no_store(StatusCode::CONFLICT, Json(body)));
            }
            let page = cart_page(&state, &session, said).await?;
            Ok(no_store(StatusCode::CONFLICT, templates::render(&page)?))
        }
        CheckoutOutcome::Empty => Err(WebError::bad_request("your cart is empty")),
        CheckoutOutcome::UnknownItem { item_id } => Err(WebError::new(
            StatusCode::CONFLICT,
            "unknown_item",
            format!("item {item_id} is no longer sold; remove it and try again"),
        )),
        CheckoutOutcome::Retired { item_id } => Err(WebError::new(
            StatusCode::CONFLICT,
            "item_retired",
            format!(
                "item {item_id} is no longer available; remove it from your cart and try again"
            ),
        )),
        CheckoutOutcome::OnSale { item_id, .. } => Err(on_sale(item_id, true)),
    }
}

/// 409 `on_sale`: `item`'s flash sale runs, and its units are sold only through
/// it; `in_cart` when a checkout found it in the cart (not an add).
fn on_sale(item: ItemId, in_cart: bool) -> WebError {
    let what_now = if in_cart {
        "; remove it from your cart to check out the rest, or check out once the sale is over"
    } else {
        ""
    };
    WebError::new(
        StatusCode::CONFLICT,
        "on_sale",
        format!(
            "item {item} is in a flash sale (running or coming): until it ends, it is sold \
             only on the sale page ({}), at the sale's price and with a limit per account{what_now}",
            crate::flash::SHELL_PATH
        ),
    )
}
