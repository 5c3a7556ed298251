//! Catalogue edits for admins: `/admin/items/{id}`, an item's edit form, and its
//! retirement. Each saves through the same workflow as `shop items`
//! ([`shop_app::catalogue`]): the field rules, the commit, then the purge of every
//! cached page that showed the item. The edit form carries the item's version: a
//! form loaded before another change (another tab, another admin, `shop items`)
//! is refused with 409, showing the item as it is now and which of the form's
//! fields differ, instead of writing its old values back. Forms are protected
//! from other sites like every form ([`crate::csrf`]); the pages are never cached.
//! A client asking for JSON (`Accept: application/json`) gets JSON throughout:
//! `{"saved": true, "version", "pages_purged"}` (`{"retired": true, ...}`), a
//! 400 `{error, message}` for a field out of its rule, the 409 `stale` body.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde_json::json;
use shop_app::catalogue::CatalogueError;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::ItemEdit;
use shop_db::items::Item;

use crate::AppState;
use crate::error::WebError;
use crate::request::{ItemPath, admins_only, wants_json};
use crate::session::Session;
use crate::templates::{self, AdminItemPage};

/// The admin routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/admin/items/{id}", get(edit_form).post(save))
        .route("/admin/items/{id}/retire", post(retire))
        .with_state(state)
}

/// Only admins edit, each page coming back to itself after a login.
async fn admin_only(
    state: &AppState,
    session: &Session,
    headers: &HeaderMap,
    id: ItemId,
) -> Result<(), Response> {
    admins_only(state, session, headers, &format!("/admin/items/{id}")).await
}

fn page(status: StatusCode, page: &AdminItemPage) -> Result<Response, WebError> {
    Ok((
        status,
        [(header::CACHE_CONTROL, crate::PERSONAL)],
        templates::render(page)?,
    )
        .into_response())
}

async fn edit_form(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    ItemPath(id): ItemPath,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, WebError> {
    if let Err(answer) = admin_only(&state, &session, &headers, id).await {
        return Ok(answer);
    }
    let item = state
        .db
        .item(id)
        .await?
        .ok_or_else(|| WebError::not_found("there is no such item"))?;
    page(
        StatusCode::OK,
        &AdminItemPage {
            saved: q.contains_key("saved"),
            ..as_is(&item)
        },
    )
}

/// The form for `item` as it is now.
fn as_is(item: &Item) -> AdminItemPage {
    AdminItemPage {
        id: item.id.get(),
        title: item.title.clone(),
        description: item.description.clone(),
        price_cents: item.price_cents.to_string(),
        category: item.category.clone(),
        retired: item.retired,
        version: item.version,
        saved: false,
        message: None,
        differs: Vec::new(),
    }
}

/// The fields of a form (`given`) that differ from what `current` holds, each as
/// `name: sent "..", now ".."`.
fn differences(given: impl Fn(&str) -> Option<String>, current: &Item) -> Vec<(String, String)> {
    let now = [
        ("title", current.title.clone()),
        ("description", current.description.clone()),
        ("price_cents", current.price_cents.to_string()),
        ("category", current.category.clone()),
    ];
    now.into_iter()
        .filter_map(|(name, now)| {
            let sent = given(name)?;
            (sent.trim() != now).then(|| (name.to_owned(), sent))
        })
        .collect()
}

async fn save(
    State(state): State<AppState>,
    session: Session,
    ItemPath(id): ItemPath,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    if let Err(answer) = admin_only(&state, &session, &headers, id).await {
        return Ok(answer);
    }
    // A field the form did not send is left as it is.
    let given = |name: &str| form.get(name).map(String::as_str);
    let field = |name: &str| given(name).unwrap_or("");
    // The version the form was made from; without one, the later edit wins.
    let version = given("version")
        .map(|v| v.trim().parse::<i64>())
        .transpose()
        .map_err(|_| WebError::bad_request("version is a whole number"))?;
    let price = given("price_cents")
        .map(|p| p.trim().parse::<i64>())
        .transpose();
    let edit = match price {
        Ok(cents) => ItemEdit::new(
            given("title"),
            given("description"),
            cents,
            given("category"),
        )
        .map_err(|e| e.to_string()),
        Err(_) => Err("the price is a whole number of cents".to_owned()),
    };
    let edit = match edit {
        Ok(edit) => edit,
        Err(message) if wants_json(&headers) => return Err(WebError::bad_request(message)),
        Err(message) => {
            // The form again, as typed, with what is wrong; nothing changed.
            let current = state.db.item(id).await?;
            return page(
                StatusCode::BAD_REQUEST,
                &AdminItemPage {
                    title: field("title").to_owned(),
                    description: field("description").to_owned(),
                    price_cents: field("price_cents").to_owned(),
                    category: field("category").to_owned(),
                    // Still the version the form was made from, so the fixed form
                    // is refused if the item changed meanwhile.
                    version: version
                        .or(current.as_ref().map(|it| it.version))
                        .unwrap_or_default(),
                    message: Some(message),
                    ..as_is_or_empty(id, current.as_ref())
                },
            );
        }
    };
    match state.catalogue().update(id, &edit, version).await {
        Ok(applied) if wants_json(&headers) => {
            let version = state.db.item(id).await?.map(|item| item.version);
            Ok(Json(json!({
                "saved": true,
                "version": version,
                "pages_purged": applied.pages_purged,
            }))
            .into_response())
        }
        Ok(_) => Ok(Redirect::to(&format!("/admin/items/{id}?saved=1")).into_response()),
        Err(CatalogueError::Stale { current }) => {
            let differs = differences(|name| given(name).map(str::to_owned), &current);
            if wants_json(&headers) {
                let body = json!({
                    "error": "stale",
                    "message": "the item changed since this form was loaded; nothing was saved",
                    "version": current.version,
                    "current": {
                        "title": current.title,
                        "description": current.description,
                        "price_cents": current.price_cents,
                        "category": current.category,
                    },
                    "differs": differs.iter().map(|(name, _)| name).collect::<Vec<_>>(),
                });
                return Ok((StatusCode::CONFLICT, Json(body)).into_response());
            }
            // The item as it is now, to edit again; what this form would have
            // changed back is listed.
            let listed = differs
                .iter()
                .map(|(name, sent)| format!("{name}: you sent “{sent}”"))
                .collect();
            page(
                StatusCode::CONFLICT,
                &AdminItemPage {
                    message: Some(format!(
                        "This item was changed since you loaded this form (it is now at version \
                         {}), so nothing was saved. Its current values are below; these \
                         fields of yours differ from them:",
                        current.version
                    )),
                    differs: listed,
                    ..as_is(&current)
                },
            )
        }
        Err(error) => Err(error.into()),
    }
}

/// [`as_is`] for an item that may be gone.
fn as_is_or_empty(id: ItemId, item: Option<&Item>) -> AdminItemPage {
    match item {
        Some(item) => as_is(item),
        None => AdminItemPage {
            id: id.get(),
            title: String::new(),
            description: String::new(),
            price_cents: String::new(),
            category: String::new(),
            retired: false,
            version: 0,
            saved: false,
            message: None,
            differs: Vec::new(),
        },
    }
}

async fn retire(
    State(state): State<AppState>,
    session: Session,
    ItemPath(id): ItemPath,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    if let Err(answer) = admin_only(&state, &session, &headers, id).await {
        return Ok(answer);
    }
    let applied = state.catalogue().retire(id).await?;
    if wants_json(&headers) {
        return Ok(Json(json!({
            "retired": true,
            "pages_purged": applied.pages_purged,
        }))
        .into_response());
    }
    Ok(Redirect::to(&format!("/admin/items/{id}?saved=1")).into_response())
}
