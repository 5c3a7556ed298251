//! Who is asking: the session token cookie, parsed and checked against `login:`.
//! (The full session layer, issuing cookies and touching sessions, arrives with the
//! web shop; this is the read side the JSON endpoints need.)

use axum::http::HeaderMap;
use axum::http::header::COOKIE;
use shop_cache::domain::UserId;
use shop_cache::session::{SessionToken, Sessions};

use crate::error::WebError;

/// The cookie holding the session token.
pub const COOKIE_NAME: &str = "shop_session";

/// The session token from the `Cookie` header, if there is a well-formed one.
/// Anything else (missing, malformed, oversized) is treated as no cookie.
pub fn token(headers: &HeaderMap) -> Option<SessionToken> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .and_then(|(_, value)| value.parse().ok())
}

/// The logged-in user, or 401.
pub async fn require_user(headers: &HeaderMap, sessions: &Sessions) -> Result<UserId, WebError> {
    let token = token(headers).ok_or_else(WebError::unauthorized)?;
    sessions
        .check_token(&token)
        .await?
        .ok_or_else(WebError::unauthorized)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_cookie(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn finds_the_token_among_other_cookies() {
        let t = SessionToken::generate();
        let h = with_cookie(&format!("a=1; {COOKIE_NAME}={}; b=2", t.expose()));
        assert_eq!(token(&h), Some(t));
    }

    #[test]
    fn bad_cookies_are_no_cookie() {
        for v in [
            "",
            "shop_session=",
            "shop_session=short",
            "shop_session=AAAAAAAAAAAAAAAAAAAAA:",
            &format!("shop_session={}", "A".repeat(5000)),
            "other=AAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert_eq!(token(&with_cookie(v)), None, "{v}");
        }
        assert_eq!(token(&HeaderMap::new()), None);
    }
}
