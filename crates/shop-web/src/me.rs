//! `GET /api/me`: the per-user parts of every page (who is logged in, the cart,
//! recently viewed items), for the pages' scripts, so page HTML can be shared and
//! cached.
//!
//! Asked for by every page view, so a warm call reads no database: the user's
//! name from [`UserNames`] (a name never changes), the viewed items' titles and
//! prices from the process's [`crate::purged_copy::ItemCopies`] (dropped at every
//! catalogue change, so a new title, price or retirement shows at once; a retired
//! item leaves the list, as it can no longer be bought). The
//! cart and the history are read from Redis on every call by the session
//! layer (its [`Holdings`], asked for on [`PATH`]): one Redis round trip a
//! guest's `/api/me`, and a logged-in user's on one node once the process has
//! seen the session logged in (the account's cart read in the same pipeline,
//! [`Holdings::account_cart`]); two on a cluster, where the account's cart is
//! in the user's slot. Where the process writes touches behind (the shop does),
//! that read is plain reads in one pipeline and the touch is held back for the
//! flusher as an item page's is; a session the shop does not know, or one near
//! the end of a lifetime, is touched at once by the touch script instead, so
//! this call still refuses a session past its lifetime and hands out the new
//! cookie. While the session store cannot answer (down, or a node
//! stalled past the request's budget), the answer is a guest's marked
//! `"degraded": true` (no cart, no history known), not an error: every page
//! goes on working.
//!
//! `?recent=N` (0 to 25) lists only the `N` most recently viewed items, and
//! reads only those: the pages' script asks for the few it shows
//! ([`PAGE_RECENT`]); without it, all of them, up to 25. Anything else is refused
//! (400, by the session layer, before the session is touched: a refused call
//! changes nothing).
//!
//! Behind an edge cache the page's script names the page's item
//! (`/api/me?item=42`, when the edge says it served the page): the session
//! layer counts that view here ([`crate::views`]) once this call found the item
//! ([`ItemFound`]); a value that is no item id is refused (400).
//!
//! An answer that hands out a new session says so (`"new_session": true`; not
//! to a client that says it is a bot): the page's own view found no session to
//! go in (a new visitor's first page), so the script then names the page's item
//! (`/api/me?recent=0&seen=42`) and it goes in the new session's history,
//! counted nowhere again (`views::serve_seen`).

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::value::RawValue;
use shop_cache::CacheError;
use shop_cache::cart::CartOf;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::session::{HISTORY_LEN, Holdings};

use crate::AppState;
use crate::error::{Cause, WebError};
use crate::session::Session;
use crate::views::{ItemFound, NamedView};

/// The path of the per-user call.
pub const PATH: &str = "/api/me";

/// How many recently viewed items the pages' script asks for (`recent=6`): the
/// five it shows, and the page's own item, which it leaves out. Spelled again
/// in `assets/shop.js` and in `shop load`, which asks as the script does.
pub const PAGE_RECENT: usize = 6;

/// What a per-user call's query asks for, read in one pass by the session
/// layer (before it touches the session, so a refused call changes nothing),
/// which hands it to the handler as a request extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeQuery {
    /// How many recently viewed items to list (`recent=`, 0 to [`HISTORY_LEN`];
    /// all of them without it).
    pub recent: usize,
    /// The item of the page an edge served (`item=`), whose view this call
    /// counts ([`crate::views`]).
    pub item: Option<ItemId>,
    /// The item of a page already counted, to put in the session's history
    /// (`seen=`): the script sends it after an answer that started a session
    /// (`"new_session": true`), whose page's view found no session to go in
    /// (`views::serve_seen`).
    pub seen: Option<ItemId>,
}

impl MeQuery {
    /// The query's `recent=`, `item=` and `seen=` (the first of each); `Err`
    /// says what is wrong with a value that is no count or no item id.
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let (mut recent, mut item, mut seen) = (None, None, None);
        for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*name {
                "recent" if recent.is_none() => recent = Some(value),
                "item" if item.is_none() => item = Some(value),
                "seen" if seen.is_none() => seen = Some(value),
                _ => {}
            }
        }
        let item_id = |name: &str, value: Option<std::borrow::Cow<'_, str>>| {
            value
                .map(|value| {
                    value
                        .parse::<ItemId>()
                        .map_err(|_| format!("{name} must be an item id, not {value:?}"))
                })
                .transpose()
        };
        let item = item_id("item", item)?;
        let seen = item_id("seen", seen)?;
        let recent = match recent {
            None => HISTORY_LEN,
            Some(value) => value
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= HISTORY_LEN)
                .ok_or_else(|| {
                    format!("recent must be a count from 0 to {HISTORY_LEN}, not {value:?}")
                })?,
        };
        Ok(Self { recent, item, seen })
    }
}

/// `/api/me`.
pub fn router(state: AppState) -> Router {
    Router::new().route(PATH, get(me)).with_state(state)
}

/// Logged-in users' names kept in memory: at most [`UserNames::MAX`] of them, each
/// for at most [`UserNames::TTL`].
#[derive(Clone)]
pub struct UserNames(moka::sync::Cache<UserId, Arc<str>>);

impl UserNames {
    /// The most names kept.
    pub const MAX: u64 = 100_000;
    /// The longest a name is kept.
    pub const TTL: Duration = Duration::from_secs(600);

    /// `user`'s name: from memory, else from the database (and then kept).
    pub async fn name(&self, db: &shop_db::Db, user: UserId) -> Result<Option<Arc<str>>, WebError> {
        if let Some(name) = self.0.get(&user) {
            return Ok(Some(name));
        }
        let Some(name) = db.user_name(user).await? else {
            return Ok(None);
        };
        let name: Arc<str> = name.into();
        self.0.insert(user, name.clone());
        Ok(Some(name))
    }
}

impl Default for UserNames {
    fn default() -> Self {
        Self(
            moka::sync::Cache::builder()
                .max_capacity(Self::MAX)
                .time_to_live(Self::TTL)
                .build(),
        )
    }
}

/// The answer of `/api/me`, serialized as it stands (no intermediate value).
#[derive(Serialize)]
struct Me<'a> {
    user: Option<User<'a>>,
    cart: Cart,
    recently_viewed: Vec<&'a RawValue>,
    /// The session store could not answer in time: the cart and the history are
    /// not known (shown empty), the visitor is treated as a guest.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    degraded: bool,
    /// This answer hands out a new session (its cookie): nothing before it is
    /// in the history, so the page's script names its page's item (`seen=`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    new_session: bool,
}

#[derive(Serialize)]
struct User<'a> {
    id: u64,
    name: &'a str,
}

#[derive(Serialize)]
struct Cart {
    count: u32,
    lines: Vec<Line>,
}

#[derive(Serialize)]
struct Line {
    item: u64,
    quantity: u32,
}

async fn me(
    State(state): State<AppState>,
    session: Session,
    holdings: Option<Extension<Holdings>>,
    named: Option<Extension<NamedView>>,
    asked: Option<Extension<MeQuery>>,
    issued: Option<Extension<crate::session::Issued>>,
    uri: axum::http::Uri,
) -> Result<Response, WebError> {
    // Read by the session layer; here only where no layer did.
    let asked = match asked {
        Some(Extension(asked)) => asked,
        None => MeQuery::parse(uri.query()).map_err(WebError::bad_request)?,
    };
    // The item the page's script named: counted (by the session layer) if it
    // can be viewed, as its page would have answered 200.
    let found = match named {
        Some(Extension(NamedView(item))) => {
            crate::purged_copy::items(&state.db, state.item_copies.as_deref(), &[item])
                .await?
                .first()
                .is_some_and(|item| !item.retired)
        }
        None => false,
    };
    let name = match session.user {
        Some(id) => state.user_names.name(&state.db, id).await?,
        None => None,
    };
    // Read with the touch; read now only where the layer did not. A Redis that
    // cannot answer now (down, or stalled past the request's budget) makes this a
    // guest's answer marked `degraded`, not an error: the page goes on.
    let mut degraded = session.store_failed;
    let Holdings {
        mut cart,
        mut viewed,
        account_cart,
    } = match holdings {
        Some(Extension(holdings)) => holdings,
        None if degraded => Holdings::default(),
        None => match read_holdings(&state, &session).await {
            Ok(holdings) => holdings,
            Err(error) => {
                degraded = unavailable(error)?;
                Holdings::default()
            }
        },
    };
    // Logged in: the account's cart, as the session layer read it in its round
    // trip when it could (one node) and nothing is left to merge; else one more
    // round trip (in the user's slot), after merging what the session's own
    // cart still holds (a merge its login left undone).
    if let Some(user) = session.user.filter(|_| !degraded) {
        cart = match account_cart.filter(|(of, _)| *of == user && cart.is_empty()) {
            Some((_, account)) => account,
            None => {
                crate::cart::finish_merge(&state, &session.token, user, Some(&cart)).await;
                match state.carts.get(CartOf::Account(user)).await {
                    Ok(cart) => cart,
                    Err(error) => {
                        degraded = unavailable(error)?;
                        Vec::new()
                    }
                }
            }
        };
    }
    viewed.truncate(asked.recent);
    let recent =
        crate::purged_copy::items(&state.db, state.item_copies.as_deref(), &viewed).await?;
    let body = Me {
        user: session
            .user
            .zip(name.as_deref())
            .map(|(id, name)| User { id: id.get(), name }),
        cart: Cart {
            count: cart.iter().map(|(_, q)| q.get()).sum(),
            lines: cart
                .iter()
                .map(|(id, q)| Line {
                    item: id.get(),
                    quantity: q.get(),
                })
                .collect(),
        },
        recently_viewed: recent
            .iter()
            .filter(|item| !item.retired)
            .map(|item| &*item.json)
            .collect(),
        degraded,
        new_session: issued.is_some(),
    };
    let mut resp = ([(header::CACHE_CONTROL, crate::PERSONAL)], Json(body)).into_response();
    if found {
        resp.extensions_mut().insert(ItemFound);
    }
    Ok(resp)
}

/// The cart and history of a session whose touch did not read them.
async fn read_holdings(state: &AppState, session: &Session) -> Result<Holdings, CacheError> {
    Ok(Holdings {
        cart: state.carts.get(&session.token).await?,
        viewed: state.sessions.recently_viewed(&session.token).await?,
        account_cart: None,
    })
}

/// `Ok(true)` (logged) for a Redis that cannot answer now; the error otherwise.
fn unavailable(error: CacheError) -> Result<bool, WebError> {
    if !error.is_unavailable() {
        return Err(error.into());
    }
    Cause::redis(
        &error,
        "session store unavailable; /api/me answers as for a guest",
    )
    .log();
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_read_in_one_pass() {
        let item = |id| Some(ItemId::new(id).unwrap());
        let parse = MeQuery::parse;
        assert_eq!(
            parse(None),
            Ok(MeQuery {
                recent: HISTORY_LEN,
                item: None,
                seen: None
            })
        );
        assert_eq!(parse(Some("")), parse(None));
        assert_eq!(
            parse(Some("recent=0&seen=9&seen=x")),
            Ok(MeQuery {
                recent: 0,
                item: None,
                seen: item(9)
            })
        );
        assert_eq!(
            parse(Some("recent=6")),
            Ok(MeQuery {
                recent: 6,
                item: None,
                seen: None
            })
        );
        assert_eq!(
            parse(Some("item=42&recent=0")),
            Ok(MeQuery {
                recent: 0,
                item: item(42),
                seen: None
            })
        );
        // The first of each counts, as a browser's form would send it; others
        // are ignored.
        assert_eq!(
            parse(Some("recent=3&x=y&recent=abc&item=7&item=zz")),
            Ok(MeQuery {
                recent: 3,
                item: item(7),
                seen: None
            })
        );
        assert_eq!(
            parse(Some("recent=%32%35")),
            Ok(MeQuery {
                recent: 25,
                item: None,
                seen: None
            })
        );
        for bad in [
            "recent=26",
            "recent=-1",
            "recent=",
            "recent=abc",
            "item=0",
            "item=abc",
            "item=",
            "recent=6&item=x",
            "seen=0",
            "seen=abc",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
        assert!(
            parse(Some("item=abc"))
                .unwrap_err()
                .contains("item must be an item id")
        );
        assert!(
            parse(Some("recent=99"))
                .unwrap_err()
                .contains("from 0 to 25")
        );
    }
}
