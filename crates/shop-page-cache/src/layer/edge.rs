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

/// The most tags a page's `Surrogate-Key` names. A page with more (or more
/// bytes of them) could not be purged at the edge by every tag it shows, so it is
/// marked `Cache-Control: public, no-cache`: the edge asks the shop every time,
/// and the shop's own cache still serves it.
pub const MAX_SURROGATE_KEYS: usize = 64;

/// The most bytes of a page's `Surrogate-Key`.
pub const MAX_SURROGATE_KEY_BYTES: usize = 1_024;

/// Marks a page as the same for everyone, for the caches between the shop and
/// the browser: `Cache-Control: public, max-age=0` (a browser revalidates with
/// its ETag), `s-maxage` the page TTL, `stale-while-revalidate` and
/// `stale-if-error` this cache's own windows (RFC 5861), and its tags in
/// `Surrogate-Key` (within [`MAX_SURROGATE_KEYS`] and [`MAX_SURROGATE_KEY_BYTES`];
/// a page whose tags do not fit is marked `public, no-cache` instead). The session layer
/// sends no `Set-Cookie` on a page marked `public`.
pub(crate) fn mark_shared(store: &PageStore, headers: &mut HeaderMap, tags: &[PageTag]) {
    let Some(keys) = surrogate_keys(tags) else {
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(SHARED_NO_CACHE),
        );
        return;
    };
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
    if !keys.is_empty()
        && let Ok(value) = HeaderValue::from_str(&keys)
    {
        headers.insert(SURROGATE_KEY, value);
    }
}

/// A kept page as served (`X-Cache: what`), saying how old it is: `Age`, the
/// seconds since it was rendered (its `fresh_until_ms` less the TTL it was
/// kept for: the `s-maxage` it was stored with, the store's TTL without one).
/// A cache in front (an edge) then keeps it for what is left of its
/// `s-maxage`, not a whole one again: without it a page the shop had kept
/// nearly a TTL and its serve-stale window stayed at the edge as long again,
/// twice what the docs promise for what is not purged (view and order counts).
pub(crate) fn kept(
    store: &PageStore,
    mut resp: axum::response::Response,
    fresh_until_ms: u64,
    what: &'static str,
) -> axum::response::Response {
    let ttl_ms = s_maxage(resp.headers()).map_or(store.ttl().as_millis() as u64, |s| s * 1_000);
    let rendered = fresh_until_ms.saturating_sub(ttl_ms);
    let age = crate::now_ms().saturating_sub(rendered) / 1_000;
    resp.headers_mut()
        .insert(header::AGE, HeaderValue::from(age));
    super::labelled(resp, what)
}

/// The `s-maxage` of a page's `Cache-Control`, in seconds.
fn s_maxage(headers: &HeaderMap) -> Option<u64> {
    let control = headers.get(header::CACHE_CONTROL)?.to_str().ok()?;
    let (_, rest) = control.split_once("s-maxage=")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// What a page the same for everyone says when no shared cache may keep it
/// without asking (it may be old, or could not be purged by all its tags):
/// still the same for everyone (no cookie on it), revalidated on every use.
pub(crate) const SHARED_NO_CACHE: &str = "public, no-cache";

/// Takes back [`mark_shared`]'s freshness from a page that may be old (a purge
/// came while it was rendered):
/// [`SHARED_NO_CACHE`], no `Surrogate-Key`.
pub(crate) fn mark_unshared(headers: &mut HeaderMap) {
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(SHARED_NO_CACHE),
    );
    headers.remove(SURROGATE_KEY);
}

/// The tags as one `Surrogate-Key` value, or `None` if they do not fit in it.
fn surrogate_keys(tags: &[PageTag]) -> Option<String> {
    if tags.len() > MAX_SURROGATE_KEYS {
        return None;
    }
    let keys = tags
        .iter()
        .map(PageTag::as_str)
        .collect::<Vec<_>>()
        .join(" ");
    (keys.len() <= MAX_SURROGATE_KEY_BYTES).then_some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_a_page_was_kept_for_is_its_s_maxage() {
        let with = |control: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_str(control).unwrap(),
            );
            s_maxage(&headers)
        };
        assert_eq!(
            with("public, max-age=0, s-maxage=300, stale-while-revalidate=60"),
            Some(300)
        );
        assert_eq!(with("public, s-maxage=7"), Some(7));
        assert_eq!(with("public, no-cache"), None);
        assert_eq!(s_maxage(&HeaderMap::new()), None);
    }

    #[test]
    fn tags_that_do_not_fit_are_no_surrogate_key_at_all() {
        let tags = |n: u64| (0..n).map(PageTag::item).collect::<Vec<_>>();
        assert_eq!(surrogate_keys(&tags(3)).as_deref(), Some("i0 i1 i2"));
        assert!(surrogate_keys(&tags(MAX_SURROGATE_KEYS as u64)).is_some());
        assert_eq!(surrogate_keys(&tags(MAX_SURROGATE_KEYS as u64 + 1)), None);
        let long: Vec<PageTag> = (0..40)
            .map(|n| PageTag::new(&format!("{n:0>30}")))
            .collect();
        assert_eq!(surrogate_keys(&long), None, "over the bytes");
    }
}
