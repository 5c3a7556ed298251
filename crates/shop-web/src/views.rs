//! Item-page views: which requests view an item, which clients say they are bots,
//! and how a view is written with its session's touch. The session layer hands
//! it the requests [`ItemViews::of`] names, with the token they presented.
//!
//! - A view counts only when the page answered 200, or 304 to a client holding
//!   it (`GET`; not `HEAD`), so made-up ids enter neither the `viewed:` ranking
//!   nor the history.
//! - A client without a session (no cookie yet, a crawler that never returns one)
//!   and a client that says it is a bot ([`says_it_is_a_bot`]) count in the ranking
//!   only: not in a history, nor among an item's viewers (what "X% of N shoppers"
//!   counts). A browser's page script puts that first page in the new session's
//!   history once it has one (`/api/me?seen=`, `serve_seen`), counting it
//!   nowhere again.
//! - The item page itself needs no user (its HTML is shared), so its touch waits
//!   for nothing: with [`ItemViews::write_behind`] (the shop's) it is held back and
//!   written with the view by the process's flusher within a tenth of a second
//!   ([`shop_cache::session::Sessions::touch_later`]), so a page from the in-process tier costs no Redis
//!   round trip; without it, it is sent at the same time as the page's own lookup,
//!   with the item in the history, and the answer then counts the view or takes
//!   the item out of the history again.
//! - Behind an edge cache (Varnish with `deploy/varnish/shop.vcl`) the item page's
//!   HTML mostly never reaches the shop: the edge tells its own fetches apart
//!   ([`FROM_EDGE`], not counted here) and tells the page's script it served the
//!   page (`Server-Timing: edge`), and the script's per-user call names the item
//!   (`/api/me?item=42`, [`crate::me::MeQuery::item`]): that call counts the view, with the
//!   session's touch it makes anyway. A page the shop served
//!   itself was counted at its own request, and its script names no item: each
//!   view is counted once, wherever the HTML came from. A crawler that runs no
//!   script counts as above when the shop serves it the page, and not at all
//!   when the edge does.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use shop_cache::domain::ItemId;
use shop_cache::session::{SessionToken, Touch, Touched};

use crate::session::{Session, SessionLayer, identify, run_identified, run_touched, session_error};

/// The request header by which the edge says a request is its own fetch of a
/// public page (the browser's cookie removed): such a request counts no view
/// here, as the page's script names the item to `/api/me` instead. The edge
/// removes the header from what clients send; a client that sends it to the
/// shop directly only keeps its own view from being counted.
pub const FROM_EDGE: &str = "shop-edge";

/// A request extension: the item view the per-user call names
/// ([`crate::me::MeQuery::item`]), for the handler to say whether that item can be viewed
/// (by answering with [`ItemFound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedView(pub ItemId);

/// A response extension of the per-user call: the item its request named exists
/// and is for sale, so its view counts.
#[derive(Debug, Clone, Copy)]
pub struct ItemFound;

/// Which requests are item-page views, and how their touch is written.
#[derive(Debug, Clone, Copy)]
pub struct ItemViews {
    /// Which paths are item pages (the shop's: [`crate::page_cache::item_path`],
    /// `/items/{id}`).
    pub item_of: fn(&str) -> Option<ItemId>,
    /// Item pages' touches are held back and written by the process's
    /// [`shop_cache::session::ViewFlusher`] (which must run: the shop's servers
    /// run it) instead of travelling with the page. A session past its lifetime
    /// is then ended by that write, and its next request that waits for its
    /// session (the page's own `/api/me`) gets the new cookie. The per-user
    /// call ([`crate::session::SessionLayer::holdings_on`]) then holds its touch
    /// back too: it reads the session with plain reads
    /// ([`shop_cache::session::Sessions::peek`]) and touches at once only a
    /// session it does not know or one near the end of a lifetime.
    pub write_behind: bool,
}

/// A request that views an item page.
#[derive(Debug, Clone, Copy)]
pub enum View {
    /// By a visitor: counted in the ranking, its session's history and the item's
    /// viewers.
    Shopper(ItemId),
    /// By a client that says it is a bot: a session like any other, its view
    /// counted in the ranking only.
    Bot(ItemId),
}

impl ItemViews {
    /// The view `req` is, if it is one (an edge's own fetch is none).
    pub fn of(&self, req: &Request) -> Option<View> {
        if req.method() != Method::GET || req.headers().contains_key(FROM_EDGE) {
            return None;
        }
        let item = (self.item_of)(req.uri().path())?;
        Some(View::by(req, item))
    }
}

impl View {
    /// The view of `item` by the client of `req` (an item page's, or the one
    /// a per-user call names: `/api/me?item=<id>`, [`crate::me::MeQuery::item`]).
    pub(crate) fn by(req: &Request, item: ItemId) -> Self {
        match says_it_is_a_bot(req.headers()) {
            true => View::Bot(item),
            false => View::Shopper(item),
        }
    }
}

/// Serves a per-user call that names the item of a page the edge served
/// ([`ItemViews::named`]) and counts that view, as the page's own request would
/// have: a visitor's session touch puts it in the history ahead of the answer
/// ([`Touch::view_ahead`]), and the view is counted once the handler found the
/// item ([`ItemFound`]), or taken out of the history again.
///
/// Not `counted` (past the client's share, [`crate::view_shares`]): the call is
/// answered as without `item=`, and the view counts nowhere.
pub(crate) async fn serve_named(
    state: &SessionLayer,
    view: View,
    counted: bool,
    presented: Option<SessionToken>,
    https: bool,
    mut req: Request,
    next: Next,
) -> (Response, Option<SessionToken>) {
    let (item, ahead) = match view {
        View::Shopper(item) if counted => (item, presented.clone()),
        View::Shopper(item) | View::Bot(item) => (item, None),
    };
    req.extensions_mut().insert(NamedView(item));
    let touch = match ahead {
        Some(_) => Touch::request().view_ahead(item),
        None => Touch::request(),
    };
    let (resp, issued) = run_touched(state, presented, touch, https, req, next).await;
    let found = resp.status() == StatusCode::OK && resp.extensions().get::<ItemFound>().is_some();
    match ahead {
        // Still the visitor's session (not refused as past its lifetime): the
        // touch put the item in its history.
        Some(token) if issued.is_none() => {
            if let Err(error) = state.sessions.settle_view(&token, item, found).await {
                session_error(state, &error);
            }
        }
        _ if found && counted => state.sessions.count_view(item),
        _ => {}
    }
    (resp, issued)
}

/// Serves a per-user call that names the item of a page counted already
/// (`/api/me?seen=42`), for a session that page found none of: the script
/// sends it after an answer that handed out a new session
/// (`"new_session": true`), so a new visitor's first page is in the history
/// the next page shows. The item goes in the session's history ahead of the
/// answer, and out again unless the handler found it ([`ItemFound`]); it is
/// counted nowhere (its page's request was). Without a session (no cookie)
/// there is no history to put it in, and nothing is written.
pub(crate) async fn serve_seen(
    state: &SessionLayer,
    item: ItemId,
    presented: Option<SessionToken>,
    https: bool,
    mut req: Request,
    next: Next,
) -> (Response, Option<SessionToken>) {
    let Some(token) = presented else {
        return run_identified(state, None, https, req, next).await;
    };
    req.extensions_mut().insert(NamedView(item));
    let touch = Touch::request().view_ahead(item);
    let (resp, issued) = run_touched(state, Some(token.clone()), touch, https, req, next).await;
    let found = resp.status() == StatusCode::OK && resp.extensions().get::<ItemFound>().is_some();
    // Still the visitor's session (not refused as past its lifetime): the
    // touch put the item in its history, where it stays if it is an item.
    if issued.is_none()
        && !found
        && let Err(error) = state.sessions.settle_view(&token, item, false).await
    {
        session_error(state, &error);
    }
    (resp, issued)
}

/// Serves an item page's request and counts its view if `counted` (see the
/// module documentation); returns the answer and the token to set in a cookie,
/// if the visitor gets a new one. Not `counted` (past the client's share,
/// [`crate::view_shares`]), it is served the same way (its touch held back as a
/// counted view's is) and its view counts nowhere.
pub(crate) async fn serve(
    state: &SessionLayer,
    view: View,
    counted: bool,
    presented: Option<SessionToken>,
    https: bool,
    mut req: Request,
    next: Next,
) -> (Response, Option<SessionToken>) {
    let item = match view {
        View::Bot(item) => {
            let (resp, issued) = run_identified(state, presented, https, req, next).await;
            if shown(&resp) && counted {
                state.sessions.count_view(item);
            }
            return (resp, issued);
        }
        View::Shopper(item) => item,
    };
    // The view, if it counts: the page found, and within the client's share.
    // Past the share the page is served as any other, its touch held back too.
    let viewed = |found: bool| (found && counted).then_some(item);
    let write_behind = state.views.is_some_and(|v| v.write_behind);
    match presented {
        // No session yet: a token for the cookie, and nothing written. The view
        // still counts in the ranking, once the page was shown.
        None => {
            let (resp, issued) = run_identified(state, None, https, req, next).await;
            if let Some(item) = viewed(shown(&resp)) {
                state.sessions.count_view(item);
            }
            (resp, issued)
        }
        // Its touch is held back and written with the next batch.
        Some(token) if write_behind => {
            req.extensions_mut()
                .insert(Session::guest(token.clone(), https));
            let resp = next.run(req).await;
            let viewed = viewed(shown(&resp));
            if state.sessions.touch_later(&token, viewed) {
                return (resp, None);
            }
            // This process holds as many touches as it may (Redis is not taking
            // them): this one is written now, or lost with the request.
            let touch = match viewed {
                Some(item) => Touch::request().view(item),
                None => Touch::request(),
            };
            match state.sessions.touch(&token, touch).await {
                Ok(Touched::Expired) => (resp, Some(SessionToken::generate())),
                Ok(_) => (resp, None),
                Err(error) => {
                    session_error(state, &error);
                    (resp, None)
                }
            }
        }
        // Its touch goes out at the same time as the page (whose lookup is its
        // own round trip), the view held until the answer says whether the page
        // was found.
        Some(token) => {
            req.extensions_mut()
                .insert(Session::guest(token.clone(), https));
            let ahead = counted.then_some(item);
            let (resp, (session, renewed)) =
                tokio::join!(next.run(req), identify(state, token, ahead, https));
            let found = shown(&resp);
            if renewed {
                // The session had expired: the view counts as a new visitor's.
                if let Some(item) = viewed(found) {
                    state.sessions.count_view(item);
                }
                return (resp, Some(session.token));
            }
            if ahead.is_none() {
                return (resp, None);
            }
            if let Err(error) = state
                .sessions
                .settle_view(&session.token, item, found)
                .await
            {
                session_error(state, &error);
            }
            (resp, None)
        }
    }
}

/// Whether an item page's answer showed its page: 200, or 304 to a client
/// that holds the page already (a browser going back to it views it too).
fn shown(resp: &Response) -> bool {
    matches!(resp.status(), StatusCode::OK | StatusCode::NOT_MODIFIED)
}

/// Words in a `User-Agent` by which crawlers, link previewers and HTTP libraries
/// name themselves (lower case). A bot that passes for a browser is not caught:
/// this keeps honest bots out of the shopper counts, nothing more.
const BOT_WORDS: &[&str] = &[
    "bot",
    "crawl",
    "spider",
    "slurp",
    "curl/",
    "wget/",
    "python-requests",
    "python-urllib",
    "go-http-client",
    "java/",
    "libwww",
    "scrapy",
    "httpclient",
    "facebookexternalhit",
    "preview",
    "phantomjs",
    "ahrefs",
    "semrush",
    "okhttp",
    "axios",
    "node-fetch",
    "undici",
    "aiohttp",
    "httpx",
    "postmanruntime",
    "guzzlehttp",
    "reqwest",
];

/// The words of `BOT_WORDS`, looked for all at once in one pass over the text.
static BOT_FINDER: std::sync::LazyLock<aho_corasick::AhoCorasick> =
    std::sync::LazyLock::new(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(BOT_WORDS)
            .expect("the bot words make an automaton")
    });

/// Whether the request's `User-Agent` says it comes from a bot (one of the words in
/// `BOT_WORDS`, in any case). Asked on every item view: one pass over the header,
/// no allocation (a word at a time over every position was 3% of a cached
/// view's CPU with a browser's User-Agent).
pub fn says_it_is_a_bot(headers: &HeaderMap) -> bool {
    let Some(agent) = headers.get(axum::http::header::USER_AGENT) else {
        return false;
    };
    BOT_FINDER.is_match(agent.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bots_are_told_by_the_words_they_use_and_browsers_are_not_bots() {
        let with = |agent: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                axum::http::header::USER_AGENT,
                HeaderValue::from_str(agent).unwrap(),
            );
            says_it_is_a_bot(&h)
        };
        assert!(with(
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
        ));
        assert!(with("curl/8.5.0"));
        assert!(with("python-requests/2.31"));
        assert!(with("facebookexternalhit/1.1"));
        assert!(
            with("Mozilla/5.0 (compatible; SEMRUSH-Crawler)"),
            "any case"
        );
        assert!(with("WGET/1.21"), "any case");
        assert!(with("Scrapy/2.11 (+https://scrapy.org)"));
        // HTTP libraries of other languages (a drill's list).
        for library in [
            "okhttp/4.12.0",
            "axios/1.7.2",
            "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
            "undici",
            "Python/3.12 aiohttp/3.9.5",
            "python-httpx/0.27.0",
            "PostmanRuntime/7.39.0",
            "GuzzleHttp/7",
            "reqwest/0.12",
        ] {
            assert!(with(library), "{library}");
        }
        assert!(!with(
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
        ));
        assert!(!with(
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36"
        ));
        assert!(
            !says_it_is_a_bot(&HeaderMap::new()),
            "no user agent: not said"
        );
    }
}
