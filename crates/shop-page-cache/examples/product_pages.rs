//! The page cache in an axum app of its own: product pages cached in Redis, tagged
//! with their product, and purged when a price changes.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 BIND=127.0.0.1:3000 cargo run -p shop-page-cache --example product_pages
//! curl -i localhost:3000/products/7            # X-Cache: MISS, then HIT
//! curl -X POST localhost:3000/products/7/price/1999
//! curl -i localhost:3000/products/7            # X-Cache: MISS, the new price
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Router};
use shop_cache::keys::Keys;
use shop_page_cache::{
    DEFAULT_TTL, PageCacheConfig, PageCacheLayer, PageStore, PageTag, PageTags, Pages,
};

/// The app's "database": product id -> price in cents.
type Prices = Arc<Mutex<HashMap<u64, u64>>>;

/// A product page, the same for everyone: tagged with its product, so a change
/// to the product purges it.
async fn product(State(prices): State<Prices>, Path(id): Path<u64>) -> impl IntoResponse {
    let cents = prices
        .lock()
        .map_or(0, |p| p.get(&id).copied().unwrap_or(1_000));
    let page = format!(
        "<h1>Product {id}</h1><p>{}.{:02}</p>",
        cents / 100,
        cents % 100
    );
    (Extension(PageTags(vec![PageTag::item(id)])), page)
}

/// A price change: saved, then every page showing the product is purged on every
/// server before the answer says so.
async fn set_price(
    State((prices, store)): State<(Prices, PageStore)>,
    Path((id, cents)): Path<(u64, u64)>,
) -> String {
    if let Ok(mut prices) = prices.lock() {
        prices.insert(id, cents);
    }
    match store.purge(&[PageTag::item(id)]).await {
        Ok(pages) => format!("saved; purged {pages} page(s)"),
        Err(error) => format!("saved; the purge failed ({error}): retry it"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let conn = shop_cache::connect(&url).await?;
    // Keys under their own prefix, so this app can share a Redis with others.
    let store = PageStore::new(conn, &Keys::with_prefix("products:"), DEFAULT_TTL);
    let cache = PageCacheLayer::new(store.clone(), PageCacheConfig::new(Pages::Shared));
    let prices = Prices::default();
    let app = Router::new()
        .route(
            "/products/{id}",
            get(product).with_state(prices.clone()).layer(cache),
        )
        .route(
            "/products/{id}/price/{cents}",
            post(set_price).with_state((prices, store)),
        );

    let listener = tokio::net::TcpListener::bind(&bind).await?;
    println!("listening on http://{}/", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
