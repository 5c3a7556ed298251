//! The shopper insights through the router: viewed-then-bought and also-bought,
//! and an order that stands when its insights cannot be recorded.

use axum::http::StatusCode;
use redis::AsyncCommands;
use shop_testapp::{TestApp, json, text};

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
            "viewed_then_bought_percent": 0.0, "also_bought": [],
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
    let placed = app.post("/checkout", Some(&buyer), "key=ins-1", true).await;
    assert_eq!(placed.status(), StatusCode::OK);

    let got = json(app.get("/api/items/2/insights", None).await).await;
    assert_eq!(
        (got["viewers"].as_u64(), got["buyers"].as_u64()),
        (Some(4), Some(1)),
        "{got}"
    );
    assert_eq!(got["viewed_then_bought_percent"], 25.0);
    assert_eq!(got["also_bought"][0]["id"], 4);
    assert!(
        got["also_bought"][0]["title"]
            .as_str()
            .unwrap()
            .ends_with(" 4")
    );
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
    let resp = app.post("/checkout", Some(&user), "key=k-ins", true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["outcome"], "placed");
    let metrics = text(app.internal_get("/metrics").await).await;
    assert!(metrics.contains("shop_insight_errors_total 1"), "{metrics}");
}
