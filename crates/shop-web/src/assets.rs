//! The shop's stylesheet, scripts and icon, compiled into the binary.
//!
//! Pages link each under a versioned URL, `/static/<name>.<digest>.<ext>` (the
//! digest is of the file's own bytes), served `Cache-Control: public,
//! max-age=31536000, immutable`: a browser or an edge keeps it for a year, and a
//! deploy that changes a file changes its URL, so no page ever runs an older
//! script or style than the one it was rendered with. The plain names
//! (`/static/shop.js`) stay for other apps' pages, and another digest (a page
//! cached before a deploy) gets this build's file: both revalidated on each use.

use std::sync::LazyLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::WebError;
use crate::pictures::IMMUTABLE;

/// One file served under `/static/`.
pub struct Asset {
    /// Its plain name, e.g. `shop.css`.
    name: &'static str,
    /// Its content type.
    content_type: &'static str,
    /// Its bytes.
    body: &'static str,
    /// Its versioned name, e.g. `shop.1a2b3c4d.css`.
    versioned: LazyLock<String>,
}

impl Asset {
    /// The URL pages link it by (versioned).
    pub fn url(&self) -> String {
        format!("/static/{}", *self.versioned)
    }
}

macro_rules! asset {
    ($name:literal, $stem:literal, $ext:literal, $type:literal) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_str!(concat!("../assets/", $name)),
            versioned: LazyLock::new(|| {
                let digest = fnv1a(include_str!(concat!("../assets/", $name)).as_bytes());
                format!("{}.{:08x}.{}", $stem, digest as u32, $ext)
            }),
        }
    };
}

/// The stylesheet.
pub static CSS: Asset = asset!("shop.css", "shop", "css", "text/css; charset=utf-8");
/// Every page's script (`/api/me`, the insights).
pub static JS: Asset = asset!("shop.js", "shop", "js", "text/javascript; charset=utf-8");
/// The flash-sale page's script.
pub static FLASH_JS: Asset = asset!("flash.js", "flash", "js", "text/javascript; charset=utf-8");

static ALL: [&Asset; 3] = [&CSS, &JS, &FLASH_JS];

/// The versioned URL of the stylesheet (for templates).
pub fn css_url() -> String {
    CSS.url()
}

/// The versioned URL of every page's script (for templates).
pub fn js_url() -> String {
    JS.url()
}

/// The versioned URL of the flash-sale page's script (for templates).
pub fn flash_js_url() -> String {
    FLASH_JS.url()
}

/// FNV-1a of `bytes`: a stable, well-spread digest (file versions, picture
/// colours); not for anything an attacker may choose to collide.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The asset routes.
pub fn router() -> Router {
    Router::new()
        .route("/static/{file}", get(asset))
        // Where browsers look for an icon by themselves; the pages link it too.
        .route("/favicon.ico", get(favicon))
}

async fn asset(Path(file): Path<String>, uri: Uri) -> Result<Response, WebError> {
    // As sent, not as decoded: one URL a file (`/static/%73hop.css` is none),
    // so an edge cache keeps one copy of it.
    if uri.path().strip_prefix("/static/") != Some(&*file) {
        return Err(WebError::not_found("there is no such file"));
    }
    for asset in ALL {
        let cache = if file == *asset.versioned {
            IMMUTABLE
        } else if file == asset.name || is_other_version(&file, asset) {
            // A plain name, or a version this build does not have: a page
            // rendered before a deploy (still in a cache) or by a server of the
            // other version during a rolling one. It gets this build's file,
            // asked for again each time, rather than none.
            "public, no-cache"
        } else {
            continue;
        };
        return Ok((
            [
                (header::CONTENT_TYPE, asset.content_type),
                (header::CACHE_CONTROL, cache),
            ],
            asset.body,
        )
            .into_response());
    }
    Err(WebError::not_found("there is no such file"))
}

/// Whether `file` is `asset` under another digest (`<stem>.<8 hex digits>.<ext>`).
fn is_other_version(file: &str, asset: &Asset) -> bool {
    let (stem, ext) = asset
        .name
        .rsplit_once('.')
        .expect("assets have an extension");
    file.strip_prefix(stem)
        .and_then(|rest| rest.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(ext))
        .and_then(|rest| rest.strip_suffix('.'))
        .is_some_and(|digest| digest.len() == 8 && digest.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The shop's icon, a small SVG (every browser the shop supports shows one).
async fn favicon() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        include_str!("../assets/favicon.svg"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_names_carry_a_digest_of_the_bytes() {
        let url = CSS.url();
        assert!(
            url.starts_with("/static/shop.") && url.ends_with(".css"),
            "{url}"
        );
        assert_eq!(url.len(), "/static/shop.12345678.css".len());
        assert_ne!(JS.url(), FLASH_JS.url());
    }
}
