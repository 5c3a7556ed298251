//! The shop's two reusable layers in an axum app of its own: sessions in token
//! cookies ([`SessionLayer`]) and the Redis page cache ([`PageCacheLayer`]) for
//! its most viewed product pages, on routes that are not the shop's.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 BIND=127.0.0.1:3000 cargo run -p shop-web --example mini_shop
//! ```
//!
//! `GET /products/{id}` is a product page: its views are counted by the session
//! layer and written to Redis every tenth of a second by the `ViewFlusher` daemon,
//! and once a product ranks among the 10,000 most viewed its page is served from
//! Redis (`X-Cache: HIT`). `GET /me` says which session asked.

use axum::Router;
use axum::extract::{Extension, Path};
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use shop_cache::domain::ItemId;
use shop_cache::keys::Keys;
use shop_cache::session::{Sessions, ViewFlusher};
use shop_page_cache::{
    DEFAULT_RANK_LIMIT, DEFAULT_TTL, PageCacheConfig, PageCacheLayer, PageStore, Pages,
};
use shop_web::session::{Session, SessionLayer, track};
use shop_web::views::ItemViews;

/// This app's item pages: `/products/{id}`.
fn product_path(path: &str) -> Option<ItemId> {
    path.strip_prefix("/products/")?.parse().ok()
}

async fn product(Path(id): Path<u64>) -> String {
    format!("<h1>Product {id}</h1><p>The same page for everyone.</p>")
}

async fn me(Extension(session): Extension<Session>) -> String {
    match session.user {
        Some(user) => format!("user {}", user.get()),
        None => "a guest".to_owned(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let conn = shop_cache::connect(&url).await?;
    // Keys under their own prefix, so this app can share a Redis with others.
    let keys = Keys::with_prefix("mini:");

    let store = Sessions::new(conn.clone(), keys.clone());
    // Writes the views the session layer counts (a serious app stops it on shutdown
    // with the token, and its last step writes what is left).
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(shop_cache::daemon::run(
        ViewFlusher::new(store.clone()),
        shutdown,
    ));
    let sessions = SessionLayer::new(store, false).with_views(ItemViews {
        item_of: product_path,
        write_behind: false,
    });
    let pages =
        PageStore::new(conn, &keys, DEFAULT_TTL).ranked(keys.item_views(), DEFAULT_RANK_LIMIT);
    let cache = PageCacheLayer::new(pages, PageCacheConfig::new(Pages::Ranked(product_path)));
    let app = Router::new()
        .route("/products/{id}", get(product).layer(cache))
        .route("/me", get(me))
        .layer(from_fn_with_state(sessions, track));

    let listener = tokio::net::TcpListener::bind(&bind).await?;
    println!("listening on http://{}/", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
