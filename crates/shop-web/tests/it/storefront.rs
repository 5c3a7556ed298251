//! The storefront as a shopper sees it: a home page with product cards even in a
//! new shop, a picture for every item (drawn by the shop, immutable), pages that
//! link their script and style under versioned URLs, and cart lines with their
//! pictures and totals.

use axum::http::{StatusCode, header};
use shop_testapp::{TestApp, text};

/// The `src` of every `<img>` in `html`.
fn pictures(html: &str) -> Vec<String> {
    html.split("<img ")
        .skip(1)
        .filter_map(|img| img.split("src=\"").nth(1)?.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The home page's "most viewed" section of `html`.
fn most_viewed(html: &str) -> &str {
    html.split("<section id=\"most-viewed\">")
        .nth(1)
        .and_then(|rest| rest.split("</section>").next())
        .expect("a most viewed section")
}

#[tokio::test]
async fn a_new_shops_home_page_shows_product_cards_with_pictures() {
    let app = TestApp::start().await;
    let html = text(app.get("/", None).await).await;
    assert!(html.contains("<section id=\"featured\">"), "{html}");
    assert!(!html.contains("Most viewed"), "nothing viewed yet");
    let cards = html.matches("<li class=\"card\">").count();
    assert!(cards >= 8, "{cards} cards");
    let srcs = pictures(&html);
    assert_eq!(srcs.len(), cards, "a picture per card");
    // Every <img> says its size (nothing shifts as it loads); those below the
    // first row load lazily.
    for img in html.split("<img ").skip(1) {
        let tag = img.split('>').next().unwrap();
        assert!(
            tag.contains("width=\"") && tag.contains("height=\""),
            "{tag}"
        );
    }
    assert!(html.matches("loading=\"lazy\"").count() >= cards - 4);

    // Once items are viewed, the most viewed take their place.
    app.rank(&[7]).await;
    let html = text(app.get("/", None).await).await;
    let most_viewed = most_viewed(&html);
    assert!(most_viewed.contains("href=\"/items/7\""), "{most_viewed}");
    let featured = html.split("<section id=\"featured\">").nth(1).unwrap();
    assert!(
        featured.contains("<li class=\"card\">"),
        "featured items still shown"
    );
}

#[tokio::test]
async fn a_picture_is_drawn_by_the_shop_and_cached_for_a_year() {
    let app = TestApp::start().await;
    let item = app
        .db
        .item(shop_cache::domain::ItemId::new(3).unwrap())
        .await
        .unwrap()
        .unwrap();
    let page = text(app.get("/items/3", None).await).await;
    let src = shop_web::pictures::url(&item.category, 3);
    assert!(page.contains(&format!("src=\"{src}\"")), "{page}");
    let resp = app.get(&src, None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "image/svg+xml");
    assert_eq!(
        resp.headers()[header::CACHE_CONTROL],
        "public, max-age=31536000, immutable"
    );
    assert!(resp.headers().get(header::SET_COOKIE).is_none());
    let svg = text(resp).await;
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg}"
    );
    // The same URL draws the same picture; another item, another.
    assert_eq!(text(app.get(&src, None).await).await, svg);
    let four = app
        .db
        .item(shop_cache::domain::ItemId::new(4).unwrap())
        .await
        .unwrap()
        .unwrap();
    let other = app
        .get(&shop_web::pictures::url(&four.category, 4), None)
        .await;
    assert_eq!(other.status(), StatusCode::OK);
    assert_ne!(text(other).await, svg);
    // Anything else under /pictures/ is no picture: another drawing, no id, an
    // item of another department, an item that does not exist.
    let elsewhere = if item.category == "audio" {
        "tools"
    } else {
        "audio"
    };
    let others = [
        "/pictures/v0/kitchen/3.svg".to_owned(),
        format!("/pictures/v0/{}/3.svg", item.category),
        "/pictures/v1/kitchen/0.svg".to_owned(),
        "/pictures/v1/kitchen/x.svg".to_owned(),
        format!("/pictures/v1/{}/3.png", item.category),
        format!("/pictures/v1/{elsewhere}/3.svg"),
        format!("/pictures/v1/{}/999999.svg", item.category),
    ];
    for bad in &others {
        assert_eq!(
            app.get(bad, None).await.status(),
            StatusCode::NOT_FOUND,
            "{bad}"
        );
    }
    // Nor is another spelling of its own URL: one URL a picture, so an edge
    // cache keeps one copy of it.
    let letter = item.category.as_bytes()[0];
    let spellings = [
        src.replacen(
            &format!("/{}/", item.category),
            &format!("/%{letter:02X}{}/", &item.category[1..]),
            1,
        ),
        src.replacen("/v1/", "/%76%31/", 1),
        src.replacen(".svg", "%2Esvg", 1),
    ];
    for other in &spellings {
        assert_ne!(other, &src);
        assert_eq!(
            app.get(other, None).await.status(),
            StatusCode::NOT_FOUND,
            "{other}"
        );
    }
    assert_eq!(app.get(&src, None).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn pages_link_their_script_and_style_by_versioned_immutable_urls() {
    let app = TestApp::start().await;
    let html = text(app.get("/items/2", None).await).await;
    for asset in [&shop_web::assets::CSS, &shop_web::assets::JS] {
        let url = asset.url();
        assert!(html.contains(&format!("\"{url}\"")), "{url} in {html}");
        let resp = app.get(&url, None).await;
        assert_eq!(resp.status(), StatusCode::OK, "{url}");
        assert_eq!(
            resp.headers()[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
    }
    // The plain names, and another version (a page cached before a deploy),
    // get this build's file, revalidated each time; anything else is no file.
    for other in ["/static/shop.js", "/static/shop.0000abcd.js"] {
        let resp = app.get(other, None).await;
        assert_eq!(resp.status(), StatusCode::OK, "{other}");
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "public, no-cache");
    }
    for none in [
        "/static/shop.0000abcd.css.js",
        "/static/shop.xyz.js",
        "/static/other.js",
    ] {
        assert_eq!(
            app.get(none, None).await.status(),
            StatusCode::NOT_FOUND,
            "{none}"
        );
    }
}

#[tokio::test]
async fn the_cart_shows_each_lines_picture_unit_price_and_total() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    let added = app
        .post("/cart", Some(&cookie), "item=5&count=3", false)
        .await;
    assert_eq!(added.status(), StatusCode::SEE_OTHER);
    let item = app
        .db
        .item(shop_cache::domain::ItemId::new(5).unwrap())
        .await
        .unwrap()
        .unwrap();
    let html = text(app.get("/cart", Some(&cookie)).await).await;
    assert!(
        html.contains(&shop_web::pictures::url(&item.category, 5)),
        "{html}"
    );
    let unit = shop_web::templates::money(item.price_cents);
    let total = shop_web::templates::money(3 * item.price_cents);
    assert!(html.contains(&format!("<td>{unit}</td>")), "{html}");
    assert!(
        html.contains(&format!("<td class=\"line-total\">{total}</td>")),
        "{html}"
    );
}

#[tokio::test]
async fn an_order_that_takes_the_last_units_purges_the_page_that_said_in_stock() {
    let app = TestApp::start().await;
    let id = shop_cache::domain::ItemId::new(4).unwrap();
    assert!(app.db.set_stock(id, 2).await.unwrap());
    app.rank(&[4]).await;
    let page = |html: &str| html.contains("class=\"stock in-stock\">In stock<");
    let _ = app.get("/items/4", None).await;
    let cached = app.get("/items/4", None).await;
    assert_eq!(cached.headers()["x-cache"], "HIT");
    assert!(page(&text(cached).await));

    let cookie = app.logged_in("una").await;
    let added = app
        .post("/cart", Some(&cookie), "item=4&count=2", false)
        .await;
    assert_eq!(added.status(), StatusCode::SEE_OTHER);
    let form = app.checkout_form(&cookie, "last-units").await;
    let placed = app.post("/checkout", Some(&cookie), &form, false).await;
    let location = placed.headers()[header::LOCATION].to_str().unwrap();
    assert!(location.starts_with("/account?placed="), "{location}");
    let account = text(app.get(location, Some(&cookie)).await).await;
    assert!(account.contains(" is placed."), "{account}");

    let after = text(app.get("/items/4", None).await).await;
    assert!(
        after.contains("class=\"stock out-of-stock\">Out of stock<"),
        "{after}"
    );
}

/// Without a tier whose feed hears purges, the home page keeps only its picks:
/// its items are read at every page.
#[tokio::test]
async fn without_a_purge_feed_the_home_page_reads_its_items_every_time() {
    let app = TestApp::start().await;
    let first = text(app.get("/", None).await).await;
    let reads = app.db.reads();
    let again = text(app.get("/", None).await).await;
    assert_eq!(again, first);
    assert_eq!(app.db.reads() - reads, 1, "one read of the items shown");
}

/// The home page rendered is kept and served again (no database read, no
/// render) while the ranking's order is the same and no purge was seen: a new
/// ranking and a catalogue change show on the next page.
#[tokio::test]
async fn the_home_page_is_kept_in_memory_and_shows_a_change_at_once() {
    let app = TestApp::start().await;
    let stop = tokio_util::sync::CancellationToken::new();
    shop_testapp::run_tier_feed(&app.state, &stop).await;
    let first = text(app.get("/", None).await).await;
    let reads = app.db.reads();
    let again = text(app.get("/", None).await).await;
    assert_eq!(again, first);
    assert_eq!(app.db.reads(), reads, "a kept page reads no database");

    // The ranking changes: the next page follows it.
    assert!(!first.contains("Most viewed"), "nothing viewed yet");
    app.rank(&[7]).await;
    let ranked = text(app.get("/", None).await).await;
    let most_viewed = most_viewed(&ranked);
    assert!(most_viewed.contains("href=\"/items/7\""), "{most_viewed}");
    let reads = app.db.reads();
    assert_eq!(text(app.get("/", None).await).await, ranked);
    assert_eq!(app.db.reads(), reads, "kept again");

    // An item featured moves to a new department: its card, and the new
    // department's link, show on the next home page.
    let featured = first.split("<section id=\"featured\">").nth(1).unwrap();
    let id: u64 = featured
        .split("href=\"/items/")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|id| id.parse().ok())
        .unwrap();
    let edit = shop_cache::domain::catalogue::ItemEdit::new(
        Some("A brand new lamp"),
        None,
        None,
        Some("lighting"),
    )
    .unwrap();
    app.state
        .catalogue()
        .update(shop_cache::domain::ItemId::new(id).unwrap(), &edit, None)
        .await
        .unwrap();
    let after = text(app.get("/", None).await).await;
    assert!(after.contains("A brand new lamp"), "{after}");
    assert!(after.contains("href=\"/c/lighting\""), "{after}");

    // Another server's change, heard over the purge feed.
    let other = app.second_state();
    let edit =
        shop_cache::domain::catalogue::ItemEdit::new(Some("An even newer lamp"), None, None, None)
            .unwrap();
    other
        .catalogue()
        .update(shop_cache::domain::ItemId::new(id).unwrap(), &edit, None)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let page = text(app.get("/", None).await).await;
        if page.contains("An even newer lamp") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the change never showed: {page}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop.cancel();
}

/// Every page's title is "<what> · Fake Web Retailer", one separator for all.
#[tokio::test]
async fn every_page_title_ends_the_same_way() {
    let app = TestApp::start().await;
    for uri in [
        "/items/3",
        "/items",
        "/search?q=lamp",
        "/login",
        "/signup",
        "/cart",
        "/flash",
    ] {
        let html = text(app.get(uri, None).await).await;
        let title = html
            .split("<title>")
            .nth(1)
            .and_then(|rest| rest.split("</title>").next())
            .unwrap_or_else(|| panic!("{uri}: no title in {html}"));
        assert!(title.ends_with(" · Fake Web Retailer"), "{uri}: {title}");
    }
}
