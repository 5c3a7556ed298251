//! The operations page: admins only, live figures, plots with a point per second
//! sampled.

use axum::http::{StatusCode, header};

use shop_testapp::{TestApp, text};

/// The points of the plot line `series`, as drawn.
fn points(html: &str, series: &str) -> usize {
    html.split(&format!("data-series=\"{series}\" points=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map_or(0, |p| p.split(' ').filter(|s| !s.is_empty()).count())
}

#[tokio::test]
async fn only_admins_see_the_operations_page() {
    let app = TestApp::start().await;
    let guest = app.visitor().await;
    let resp = app.get("/ops", Some(&guest)).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[header::LOCATION], "/login?next=/ops");

    let user = app.logged_in("plain").await;
    let resp = app.get("/ops", Some(&user)).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert!(text(resp).await.contains("for admins"));

    assert!(app.db.grant_admin("plain").await.unwrap());
    assert!(!app.db.grant_admin("nobody").await.unwrap());
    let resp = app.get("/ops", Some(&user)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CACHE_CONTROL], "private, no-store");
    assert!(text(resp).await.contains("<h1>Operations</h1>"));
}

#[tokio::test]
async fn the_figures_and_plots_follow_the_traffic() {
    let app = TestApp::start().await;
    app.start_sale(3, 40, 100).await;
    let admin = app.logged_in("boss").await;
    app.db.grant_admin("boss").await.unwrap();
    let mut sampler = app.state.traffic_sampler();

    let html = text(app.get("/ops", Some(&admin)).await).await;
    assert_eq!(points(&html, "requests/s"), 0, "no samples yet");

    sampler.step();
    for n in [5, 5, 5, 6] {
        app.get(&format!("/items/{n}"), None).await;
    }
    app.flush_views().await;
    sampler.step();
    app.get("/items/5", None).await;
    sampler.step();
    // A visitor who comes back (the cookieless ones above have no session).
    let back = app.visitor().await;
    app.get("/cart", Some(&back)).await;

    let html = text(app.get("/ops", Some(&admin)).await).await;
    for series in ["requests/s", "p99 ms", "hits/s", "misses/s"] {
        assert_eq!(points(&html, series), 2, "{series}: {html}");
    }
    // Live sessions: the admin's and the returning visitor's.
    let sessions: u64 = html
        .split("id=\"sessions\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .and_then(|n| n.parse().ok())
        .expect("a session count");
    assert!(sessions >= 2, "{sessions}");
    // The most viewed: item 5 first.
    let top = html.split("<ol class=\"top\">").nth(1).expect("a top list");
    assert!(
        top.trim_start().starts_with("<li><a href=\"/items/5\">"),
        "{top}"
    );
    // The sale's stock, from Redis.
    assert!(
        html.contains("<td><a href=\"/items/3\">3</a></td><td>40</td>"),
        "{html}"
    );
}
