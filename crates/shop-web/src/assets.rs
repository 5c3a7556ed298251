//! The shop's stylesheet and script, compiled into the binary.

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
