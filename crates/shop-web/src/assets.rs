//! The shop's stylesheet, scripts and icon, compiled into the binary.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

/// The asset routes.
pub fn router() -> Router {
    Router::new()
        .route("/static/shop.css", get(css))
        .route("/static/shop.js", get(js))
        .route("/static/flash.js", get(flash_js))
        // Where browsers look for an icon by themselves; the pages link it too.
        .route("/favicon.ico", get(favicon))
}

const CACHE: &str = "public, max-age=3600";

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE),
        ],
        include_str!("../assets/shop.css"),
    )
}

async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE),
        ],
        include_str!("../assets/shop.js"),
    )
}

async fn flash_js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, CACHE),
        ],
        include_str!("../assets/flash.js"),
    )
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
