//! Catalogue edits for admins: `/admin/items/{id}`, an item's edit form, and its
//! retirement. Each saves through the same workflow as `shop items`
//! ([`shop_app::catalogue`]): the field rules, the commit, then the purge of every
//! cached page that showed the item. Forms are protected from other sites like
//! every form ([`crate::csrf`]); the pages are never cached.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::ItemEdit;

use crate::AppState;
use crate::error::WebError;
use crate::request::{ItemPath, admins_only};
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
async fn admin_only(state: &AppState, session: &Session, id: ItemId) -> Result<(), Response> {
    admins_only(state, session, &format!("/admin/items/{id}")).await
}

fn page(status: StatusCode, page: &AdminItemPage) -> Result<Response, WebError> {
    Ok((
        status,
        [(header::CACHE_CONTROL, "no-store")],
        templates::render(page)?,
    )
        .into_response())
}

async fn edit_form(
    State(state): State<AppState>,
    session: Session,
    ItemPath(id): ItemPath,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, WebError> {
    if let Err(answer) = admin_only(&state, &session, id).await {
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
            id: id.get(),
            title: item.title,
            description: item.description,
            price_cents: item.price_cents.to_string(),
            category: item.category,
            retired: item.retired,
            saved: q.contains_key("saved"),
            message: None,
        },
    )
}

async fn save(
    State(state): State<AppState>,
    session: Session,
    ItemPath(id): ItemPath,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, WebError> {
    if let Err(answer) = admin_only(&state, &session, id).await {
        return Ok(answer);
    }
    // A field the form did not send is left as it is.
    let given = |name: &str| form.get(name).map(String::as_str);
    let field = |name: &str| given(name).unwrap_or("");
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
        Err(message) => {
            // The form again, as typed, with what is wrong; nothing changed.
            let retired = state.db.item(id).await?.is_some_and(|it| it.retired);
            return page(
                StatusCode::BAD_REQUEST,
                &AdminItemPage {
                    id: id.get(),
                    title: field("title").to_owned(),
                    description: field("description").to_owned(),
                    price_cents: field("price_cents").to_owned(),
                    category: field("category").to_owned(),
                    retired,
                    saved: false,
                    message: Some(message),
                },
            );
        }
    };
    state.catalogue().update(id, &edit).await?;
    Ok(Redirect::to(&format!("/admin/items/{id}?saved=1")).into_response())
}

async fn retire(
    State(state): State<AppState>,
    session: Session,
    ItemPath(id): ItemPath,
) -> Result<Response, WebError> {
    if let Err(answer) = admin_only(&state, &session, id).await {
        return Ok(answer);
    }
    state.catalogue().retire(id).await?;
    Ok(Redirect::to(&format!("/admin/items/{id}?saved=1")).into_response())
}
