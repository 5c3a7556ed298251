//! What a page tells the caches between the shop and the browser (a CDN, an
//! edge Varnish): that it is the same for everyone and for how long, and the tags
//! an edge purges it by.

use axum::http::header::{self, HeaderName};
use axum::http::{HeaderMap, HeaderValue};

use crate::{PageStore, PageTag};

/// The page's tags, for an edge cache that purges by them (Varnish's xkey,
/// Fastly): at most [`MAX_SURROGATE_KEYS`] of them, in at most
/// [`MAX_SURROGATE_KEY_BYTES`].
pub const SURROGATE_KEY: HeaderName = HeaderName::from_static("surrogate-key");

/// The most tags a page's `Surrogate-Key` names (a page with more names the first
/// ones: an edge keeps it until its TTL for a change to the others).
pub const MAX_SURROGATE_KEYS: usize = 64;

/// The most bytes of a page's `Surrogate-Key`.
pub const MAX_SURROGATE_KEY_BYTES: usize = 1_024;

/// Marks a page as the same for everyone, for the caches between the shop and
/// the browser: `Cache-Control: public, max-age=0` (a browser revalidates with
/// its ETag), `s-maxage` the page TTL, `stale-while-revalidate` and
/// `stale-if-error` this cache's own windows (RFC 5861), and its tags in
/// `Surrogate-Key` (capped: [`MAX_SURROGATE_KEYS`], [`MAX_SURROGATE_KEY_BYTES`]).
/// The session layer sends no `Set-Cookie` on such a page.
pub(crate) fn mark_shared(store: &PageStore, headers: &mut HeaderMap, tags: &[PageTag]) {
    let grace = store.grace();
    let control = format!(
        "public, max-age=0, s-maxage={}, stale-while-revalidate={}, stale-if-error={}",
        store.ttl().as_secs(),
        grace.while_revalidate.as_secs(),
        grace.if_error.as_secs()
    );
    if let Ok(value) = HeaderValue::from_str(&control) {
        headers.insert(header::CACHE_CONTROL, value);
    }
    let mut keys = String::new();
    for tag in tags.iter().take(MAX_SURROGATE_KEYS) {
        let tag = tag.as_str();
        if keys.len() + tag.len() + 1 > MAX_SURROGATE_KEY_BYTES {
            break;
        }
        if !keys.is_empty() {
            keys.push(' ');
        }
        keys.push_str(tag);
    }
    if !keys.is_empty()
        && let Ok(value) = HeaderValue::from_str(&keys)
    {
        headers.insert(SURROGATE_KEY, value);
    }
}
