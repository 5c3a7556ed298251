//! The shopper insights through the router: viewed-then-bought and also-bought,
//! and an order that stands when its insights cannot be recorded.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use redis::AsyncCommands;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::ItemEdit;
use shop_testapp::{TestApp, json, text};
use shop_web::WebConfig;

#[tokio::test]
async fn insights_come_from_views_and_orders() {
    let app = TestApp::start().await;
    assert_eq!(
        app.get("/api/items/abc/insights", None).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        app.get("/api/items/999/insights", None).await.status(),
        StatusCode::NOT_FOUND
    );
    let empty = json(app.get("/api/items/9/insights", None).await).await;
    assert_eq!(
        empty,
        serde_json::json!({"item": 9, "viewers": 0, "buyers": 0,
            "viewed_then_bought_percent": 0.0, "viewed_then_bought_text": null,
            "min_viewers": shop_cache::insights::DEFAULT_MIN_VIEWERS, "also_bought": [],
            "also_bought_shown": 5,
            "min_co_buyers": shop_cache::insights::DEFAULT_MIN_CO_BUYERS,
            "window": "in the last two weeks"})
    );

    // Four shoppers view item 2; one of them buys it with item 4.
    let buyer = app.logged_in("rita").await;
    app.get("/items/2", Some(&buyer)).await;
    for _ in 0..3 {
        let other = app.visitor().await;
        app.get("/items/2", Some(&other)).await;
    }
    app.flush_views().await;
    app.post("/cart", Some(&buyer), "item=2&count=1", false)
        .await;
    app.post("/cart", Some(&buyer), "item=4&count=1", false)
        .await;
    let placed = app
        .post(
            "/checkout",
            Some(&buyer),
            &app.checkout_form(&buyer, "ins-1").await,
            true,
        )
        .await;
    assert_eq!(placed.status(), StatusCode::OK);

    let got = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(
        (got["viewers"].as_u64(), got["buyers"].as_u64()),
        (Some(4), Some(1)),
        "{got}"
    );
    assert_eq!(got["viewed_then_bought_percent"], 25.0);
    // Four viewers are too few to say it on the page (the default minimum: 50).
    assert_eq!(got["viewed_then_bought_text"], serde_json::Value::Null);
    // One order is too little evidence to recommend item 4 with it (the default
    // minimum: 3 orders holding both).
    assert_eq!(got["also_bought"], serde_json::json!([]));
}

#[tokio::test]
async fn also_bought_leaves_out_retired_items() {
    let app = TestApp::start().await;
    let insights = &app.state.insights;
    let item = |n: u64| shop_cache::domain::ItemId::new(n).unwrap();
    // Item 2 is bought three times with item 4 and three times with item 5; 30
    // other orders hold one item each.
    for other in [4, 5] {
        for _ in 0..3 {
            insights
                .record_order(
                    &shop_cache::domain::SessionToken::generate(),
                    &[item(2), item(other)],
                )
                .await
                .unwrap();
        }
    }
    for n in 0..30 {
        insights
            .record_order(
                &shop_cache::domain::SessionToken::generate(),
                &[item(10 + n % 10)],
            )
            .await
            .unwrap();
    }
    let got = json(app.get("/api/items/2/insights", None).await).await;
    // Equal but for the microseconds between the orders (the later first): as a set.
    let mut ids = also_bought(&got);
    ids.sort();
    assert_eq!(ids, vec![4, 5], "{got}");
    let four = got["also_bought"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == 4)
        .unwrap();
    assert_eq!(four["co_buyers"], 3.0, "{got}");
    assert!(four["score"].as_f64().unwrap() >= 3.0, "{got}");
    assert!(four["title"].as_str().unwrap().ends_with(" 4"), "{got}");
    // Retired, item 4 can no longer be bought: it is not recommended.
    app.state.catalogue().retire(item(4)).await.unwrap();
    let got = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(also_bought(&got), vec![5], "{got}");
}

#[tokio::test]
async fn the_minimum_of_co_buyers_is_a_setting() {
    let app = TestApp::with_config(WebConfig {
        insights_min_co_buyers: 1,
        ..WebConfig::default()
    })
    .await;
    let item = |n: u64| shop_cache::domain::ItemId::new(n).unwrap();
    // One order of items 2 and 4 among 21.
    let orders =
        std::iter::once(vec![item(2), item(4)]).chain((0..20).map(|n| vec![item(10 + n % 10)]));
    for order in orders {
        app.state
            .insights
            .record_order(&shop_cache::domain::SessionToken::generate(), &order)
            .await
            .unwrap();
    }
    let got = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(got["min_co_buyers"], 1, "{got}");
    assert_eq!(got["also_bought"][0]["id"], 4, "{got}");
}

#[tokio::test]
async fn a_failure_to_record_insights_does_not_fail_the_order() {
    let app = TestApp::start().await;
    let user = app.logged_in("sam").await;
    app.post("/cart", Some(&user), "item=3&count=1", false)
        .await;
    // Something else holds the key the order's insights go to.
    let _: () = app
        .redis
        .conn()
        .await
        .set(
            format!("buyers:3:{}", shop_cache::insights::current_window()),
            "not a hyperloglog",
        )
        .await
        .unwrap();
    let resp = app
        .post(
            "/checkout",
            Some(&user),
            &app.checkout_form(&user, "k-ins").await,
            true,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["outcome"], "placed");
    let metrics = text(app.internal_get("/metrics").await).await;
    assert!(metrics.contains("shop_insight_errors_total 1"), "{metrics}");
}

/// The ids an insights answer recommends, best first.
fn also_bought(got: &serde_json::Value) -> Vec<u64> {
    got["also_bought"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_u64().unwrap())
        .collect()
}

/// Purges what the page cache holds of `item` (its page, its insights).
async fn purge(app: &TestApp, item: u64) {
    let tag = shop_app::page_tags::item(ItemId::new(item).unwrap());
    app.state.pages.purge(&[tag]).await.unwrap();
}

/// A view from a client that keeps its cookie, with the given user agent.
async fn view(app: &TestApp, item: u64, cookie: &str, agent: &str) {
    let req = Request::get(format!("/items/{item}"))
        .header(header::COOKIE, cookie)
        .header(header::USER_AGENT, agent)
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.send(req).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn the_share_that_bought_is_said_with_its_evidence_past_the_minimum_and_bots_do_not_count() {
    let app = TestApp::with_config(WebConfig {
        insights_min_viewers: 4,
        ..WebConfig::default()
    })
    .await;
    const BROWSER: &str =
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36";
    // Three shoppers view item 2, and two crawlers that keep their cookies.
    let buyer = app.logged_in("una").await;
    view(&app, 2, &buyer, BROWSER).await;
    for _ in 0..2 {
        let other = app.visitor().await;
        view(&app, 2, &other, BROWSER).await;
    }
    for agent in ["Mozilla/5.0 (compatible; Googlebot/2.1)", "curl/8.5.0"] {
        let crawler = app.visitor().await;
        view(&app, 2, &crawler, agent).await;
    }
    app.flush_views().await;
    let got = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(got["viewers"], 3, "the crawlers are not shoppers: {got}");
    assert_eq!(
        got["viewed_then_bought_text"],
        serde_json::Value::Null,
        "3 < 4"
    );
    // Their views still count in the ranking (what the page cache keeps).
    let ranked: Option<f64> = app.redis.conn().await.zscore("viewed:", 2).await.unwrap();
    assert_eq!(ranked, Some(-5.0), "five views ranked: {ranked:?}");

    // A fourth shopper views it and the first buys it: 1 of 4.
    let fourth = app.visitor().await;
    view(&app, 2, &fourth, BROWSER).await;
    app.flush_views().await;
    app.post("/cart", Some(&buyer), "item=2&count=1", false)
        .await;
    let placed = app
        .post(
            "/checkout",
            Some(&buyer),
            &app.checkout_form(&buyer, "ins-2").await,
            true,
        )
        .await;
    assert_eq!(placed.status(), StatusCode::OK);
    // The answer is cached for the page TTL (see the next test): purged to read the
    // new figures at once.
    purge(&app, 2).await;
    let got = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(
        got["viewed_then_bought_text"],
        "25% of 4 shoppers who viewed this item in the last two weeks bought it.",
        "{got}"
    );
    assert_eq!(got["min_viewers"], 4);
}

/// Every item view's script asks for its insights: the answer is the same for
/// everyone, so it comes from the page cache (no database read) for the items
/// whose pages are cached, until its TTL or a change to its item or one it
/// recommends purges it.
#[tokio::test]
async fn insights_are_cached_until_an_item_they_show_changes() {
    let app = TestApp::start().await;
    let item = |n: u64| ItemId::new(n).unwrap();
    // Item 2 ranks among the most viewed (its page and insights are cached); item 3
    // was never viewed.
    app.rank(&[2]).await;
    bought_with_4(&app).await;
    let ask = async || {
        let resp = app.get("/api/items/2/insights", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let cache = resp.headers()["x-cache"].to_str().unwrap().to_owned();
        let got = json(resp).await;
        (cache, got["buyers"].as_u64().unwrap(), also_bought(&got))
    };
    assert_eq!(ask().await, ("MISS".to_owned(), 3, vec![4]));
    assert_eq!(ask().await, ("HIT".to_owned(), 3, vec![4]));
    // New orders show within the TTL, not at once: the cached answer stands.
    for _ in 0..3 {
        order(&app, &[item(2), item(5)]).await;
    }
    assert_eq!(ask().await, ("HIT".to_owned(), 3, vec![4]));
    // Item 4, which it recommends, is retired: the answer is purged and rendered
    // again from the new figures.
    app.state.catalogue().retire(item(4)).await.unwrap();
    assert_eq!(ask().await, ("MISS".to_owned(), 6, vec![5]));
    assert_eq!(ask().await, ("HIT".to_owned(), 6, vec![5]));
    // A change to the item itself purges it too.
    order(&app, &[item(2)]).await;
    let edit = ItemEdit::new(Some("A new title"), None, None, None).unwrap();
    app.state
        .catalogue()
        .update(item(2), &edit, None)
        .await
        .unwrap();
    assert_eq!(ask().await, ("MISS".to_owned(), 7, vec![5]));
    // Retired, it is gone, as its page: 410, not kept.
    app.state.catalogue().retire(item(2)).await.unwrap();
    for _ in 0..2 {
        let resp = app.get("/api/items/2/insights", None).await;
        assert_eq!(resp.status(), StatusCode::GONE);
        assert_ne!(
            resp.headers().get("x-cache").map(|v| v.as_bytes()),
            Some(&b"HIT"[..])
        );
    }
    // An item that does not rank is answered, not kept (as its page).
    for _ in 0..2 {
        let resp = app.get("/api/items/3/insights", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["x-cache"], "BYPASS");
    }
    // Not found is not kept.
    for _ in 0..2 {
        let resp = app.get("/api/items/999/insights", None).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_ne!(
            resp.headers().get("x-cache").map(|v| v.as_bytes()),
            Some(&b"HIT"[..])
        );
    }
}

/// Records an order of `items`, by a new session.
async fn order(app: &TestApp, items: &[ItemId]) {
    app.state
        .insights
        .record_order(&shop_cache::domain::SessionToken::generate(), items)
        .await
        .unwrap();
}

/// Item 2 bought three times with item 4, and 30 other orders of one item each
/// (so 4 is recommended with 2).
async fn bought_with_4(app: &TestApp) {
    let item = |n: u64| ItemId::new(n).unwrap();
    for _ in 0..3 {
        order(app, &[item(2), item(4)]).await;
    }
    for n in 0..30 {
        order(app, &[item(10 + n % 10)]).await;
    }
}

/// The insights inline in an item page (`#insights-data`), parsed.
fn inline_insights(page: &str) -> serde_json::Value {
    const OPEN: &str = "<script type=\"application/json\" id=\"insights-data\">";
    let start = page.find(OPEN).expect("the page carries its insights") + OPEN.len();
    let len = page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..start + len]).unwrap()
}

/// An item page carries its insights (what the call answers), so a page view
/// needs no call for them; the cached page is purged when an item it recommends
/// changes, and no title can break out of the data block.
#[tokio::test]
async fn an_item_page_carries_its_insights_and_is_purged_with_them() {
    let app = TestApp::start().await;
    let item = |n: u64| ItemId::new(n).unwrap();
    app.rank(&[2]).await;
    bought_with_4(&app).await;
    let page = async || {
        let resp = app.get("/items/2", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let cache = resp.headers()["x-cache"].to_str().unwrap().to_owned();
        (cache, text(resp).await)
    };
    let (cache, first) = page().await;
    assert_eq!(cache, "MISS");
    let carried = inline_insights(&first);
    let asked = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(carried, asked, "the page carries what the call answers");
    assert_eq!(also_bought(&carried), vec![4]);
    assert_eq!(page().await.0, "HIT");

    // Item 4, which the page recommends, gets a title that tries to end the block.
    let hostile = "Kettle </script><script>alert(1)</script>";
    let edit = ItemEdit::new(Some(hostile), None, None, None).unwrap();
    app.state
        .catalogue()
        .update(item(4), &edit, None)
        .await
        .unwrap();
    let (cache, again) = page().await;
    assert_eq!(cache, "MISS", "purged with the item it recommends");
    assert!(!again.contains("<script>alert(1)"), "{again}");
    let carried = inline_insights(&again);
    assert_eq!(carried["also_bought"][0]["title"], hostile);
}
