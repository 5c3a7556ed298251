//! What a request asks for, read the same way by every route: the item in its
//! path, whether it wants JSON, its idempotency key, and where to go next. Refusals are [`BadRequest`]s
//! (a 400 with the message, through `WebError`); this module depends on no other
//! of the crate, so the error and page modules can use it without a cycle.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::Deserialize;
use shop_cache::domain::{InvalidInput, ItemId};

/// The item id in a route's path (`/items/{id}`, `/api/flash/{id}/buy`, ...),
/// parsed once: a positive whole number written the one canonical way, else a 400
/// that says so. `/items/%31` (percent-encoded), `/items/01` or `/items/+1` name
/// no item: every item has one path, so the page cache's key space is the
/// catalogue's, and no spelling of a path renders a cached page uncached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemPath(pub ItemId);

impl<S: Send + Sync> FromRequestParts<S> for ItemPath {
    type Rejection = BadRequest;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, BadRequest> {
        let refused = || BadRequest(InvalidInput::ItemId.to_string());
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| refused())?;
        let id: ItemId = raw.parse().map_err(|_| refused())?;
        // As sent, not as decoded: the segment must be the id itself.
        let canonical = id.to_string();
        if !parts
            .uri
            .path()
            .split('/')
            .any(|segment| segment == canonical)
        {
            return Err(refused());
        }
        Ok(ItemPath(id))
    }
}

/// A request the shop will not act on; the message says why, for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest(pub String);

/// Does the client want JSON rather than a redirect or a page?
pub fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

/// The longest idempotency key accepted (an `Idempotency-Key` header, a checkout
/// form's key).
pub const MAX_IDEMPOTENCY_KEY: usize = 100;

/// Checks a client's idempotency key: 1 to [`MAX_IDEMPOTENCY_KEY`] visible ASCII
/// characters, else a refusal that says so.
pub fn idempotency_key(raw: Option<&str>) -> Result<&str, BadRequest> {
    raw.filter(|k| {
        !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY && k.bytes().all(|b| b.is_ascii_graphic())
    })
    .ok_or_else(|| {
        BadRequest(format!(
            "an idempotency key of 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters is \
                 required (reload the page and try again)"
        ))
    })
}

/// The answer to a page that needs a logged-in user when there is none: for a
/// JSON client 401 `login_required`, for a person the login page, which comes
/// back to `page` afterwards (a path of this site's own).
pub fn log_in_first(page: &str, headers: &axum::http::HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse;
    if wants_json(headers) {
        return crate::error::WebError::unauthorized().into_response();
    }
    axum::response::Redirect::to(&format!("/login?next={page}")).into_response()
}

/// Lets only a logged-in admin through to the page at `page`; anyone else gets
/// the answer to send instead: [`log_in_first`], or 403.
pub async fn admins_only(
    state: &crate::AppState,
    session: &crate::session::Session,
    headers: &axum::http::HeaderMap,
    page: &str,
) -> Result<(), axum::response::Response> {
    use axum::response::IntoResponse;
    let Some(user) = session.known_user().map_err(IntoResponse::into_response)? else {
        return Err(log_in_first(page, headers));
    };
    match state.db.is_admin(user).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(crate::error::WebError::new(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            "this page is for admins (shop users grant-admin NAME)",
        )
        .into_response()),
        Err(error) => Err(crate::error::WebError::from(error).into_response()),
    }
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
pub fn local_path(next: Option<&str>) -> Result<String, BadRequest> {
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
        Err(BadRequest(
            "next must be a path on this site, like /cart".to_owned(),
        ))
    }
}

/// What is wrong with a request's `Host`, as RFC 9112 (section 3.2) has a
/// server answer 400 to it: an HTTP/1.1 request without one, a request with
/// more than one, or one whose value is no `host` or `host:port`. An empty
/// value is allowed (a target with no authority); so is none in HTTP/1.0.
/// Checked by the serve loop for every request from a client (`shop::server`),
/// not by the router: requests made in-process, by tests or an embedding app,
/// carry no `Host`.
pub fn host_problem<B>(req: &axum::http::Request<B>) -> Option<BadRequest> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let refused = |message: &str| Some(BadRequest(message.to_owned()));
    match (hosts.next(), hosts.next()) {
        (None, _) if req.version() == axum::http::Version::HTTP_11 => {
            refused("an HTTP/1.1 request needs a Host header")
        }
        (None, _) => None,
        (Some(_), Some(_)) => refused("a request has one Host header, not more"),
        (Some(host), None) if host.is_empty() => None,
        (Some(host), None) => {
            let bytes = host.as_bytes();
            let is_host =
                !bytes.contains(&b'@') && axum::http::uri::Authority::try_from(bytes).is_ok();
            if is_host {
                None
            } else {
                refused("the Host header must be a host name or address, and a port if any")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::local_path;

    #[test]
    fn a_host_is_required_once_and_must_be_a_host() {
        use super::host_problem;
        use axum::http::{Request, Version};
        let with = |version: Version, hosts: &[&str]| {
            let mut req = Request::builder().version(version).uri("/items/1");
            for host in hosts {
                req = req.header("host", *host);
            }
            host_problem(&req.body(()).unwrap()).map(|refused| refused.0)
        };
        for fine in [
            "shop.example",
            "shop.example:8080",
            "127.0.0.1:80",
            "[::1]:8080",
            "",
        ] {
            assert_eq!(with(Version::HTTP_11, &[fine]), None, "{fine:?}");
        }
        assert_eq!(with(Version::HTTP_10, &[]), None);
        assert!(
            with(Version::HTTP_11, &[])
                .unwrap()
                .contains("needs a Host")
        );
        assert!(
            with(Version::HTTP_11, &["a.example", "b.example"])
                .unwrap()
                .contains("not more")
        );
        assert!(with(Version::HTTP_10, &["a.example", "a.example"]).is_some());
        for bad in [
            "user@shop.example",
            "shop example",
            "shop.example/x",
            "shop.example?x",
        ] {
            assert!(with(Version::HTTP_11, &[bad]).is_some(), "{bad:?}");
        }
    }

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
