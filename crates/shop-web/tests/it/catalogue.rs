//! A catalogue that changes: an edit, a retirement or an import is seen at once
//! through another web server on every kind of cached page, a retired item is gone
//! from every page and refused at checkout, and a checkout charges today's price.
//! On SQLite and PostgreSQL.

use axum::http::StatusCode;
use redis::AsyncCommands;
use shop_app::catalogue::CatalogueError;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::{ItemEdit, ItemFields};
use shop_db::catalogue::RetiredInImport;
use shop_testapp::{TestApp, json, send, text};
use shop_web::templates::money;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn x_cache(resp: &axum::response::Response) -> String {
    resp.headers()
        .get("x-cache")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// GETs `uri` until it is served from the cache (the first request renders it).
async fn cached(app: &TestApp, uri: &str) -> String {
    let first = app.get(uri, None).await;
    assert_eq!(first.status(), StatusCode::OK, "{uri}");
    let again = app.get(uri, None).await;
    assert_eq!(x_cache(&again), "HIT", "{uri} is cached");
    text(again).await
}

#[tokio::test]
async fn an_edit_is_seen_at_once_through_another_web_server_on_every_page_kind() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let it = app.db.item(item(3)).await.unwrap().unwrap();
        app.rank(&[3]).await;
        app.start_sale(3, 5, 10).await;
        let dept = format!("/c/{}", it.category);
        let pages = ["/items/3", "/items", dept.as_str(), "/flash"];
        for uri in pages {
            let html = cached(&app, uri).await;
            assert!(html.contains(&it.title), "{kind} {uri}");
        }

        let edit = ItemEdit::new(Some("Brand new title"), None, Some(98_765), None).unwrap();
        let applied = app
            .state
            .catalogue()
            .update(item(3), &edit, None)
            .await
            .unwrap();
        assert_eq!(applied.changed, [item(3)], "{kind}");
        assert!(applied.pages_purged >= 4, "{kind}: {applied:?}");

        // Through another web server, the moment the change returned.
        let other = app.second_server();
        for uri in pages {
            let resp = send(&other, shop_testapp::get_request(uri)).await;
            assert_eq!(resp.status(), StatusCode::OK, "{kind} {uri}");
            assert_eq!(x_cache(&resp), "MISS", "{kind} {uri}: rendered afresh");
            let html = text(resp).await;
            assert!(html.contains("Brand new title"), "{kind} {uri}");
            assert!(!html.contains(&it.title), "{kind} {uri}: no old title");
        }
        let page = text(app.get("/items/3", None).await).await;
        assert!(page.contains(&money(98_765)), "{kind}");
        // And cached again, new.
        let again = app.get("/items/3", None).await;
        assert_eq!(x_cache(&again), "HIT", "{kind}");
        assert!(text(again).await.contains("Brand new title"), "{kind}");
    }
}

#[tokio::test]
async fn an_item_moved_or_added_shows_in_its_department_at_once() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let it = app.db.item(item(4)).await.unwrap().unwrap();
        let target = app
            .db
            .categories()
            .await
            .unwrap()
            .into_iter()
            .find(|c| *c != it.category)
            .unwrap();
        let from = format!("/c/{}", it.category);
        let to = format!("/c/{target}");
        cached(&app, &from).await;
        let before = cached(&app, &to).await;
        assert!(!before.contains("href=\"/items/4\""), "{kind}");

        let edit = ItemEdit::new(None, None, None, Some(&target)).unwrap();
        app.state
            .catalogue()
            .update(item(4), &edit, None)
            .await
            .unwrap();
        let other = app.second_server();
        let moved_to = text(send(&other, shop_testapp::get_request(&to)).await).await;
        assert!(
            moved_to.contains("href=\"/items/4\""),
            "{kind}: in its new department"
        );
        let moved_from = text(send(&other, shop_testapp::get_request(&from)).await).await;
        assert!(
            !moved_from.contains("href=\"/items/4\""),
            "{kind}: out of the old one"
        );

        // A new item in a new department: in the whole listing's last page and in
        // every listing's department list.
        cached(&app, "/items?after=24").await;
        let fields = ItemFields::new("Sea kayak", "Floats.", 45_000, "boats").unwrap();
        let added = app.state.catalogue().add(None, &fields, 2).await.unwrap();
        let tail = text(send(&other, shop_testapp::get_request("/items?after=24")).await).await;
        assert!(
            tail.contains(&format!("href=\"/items/{}\"", added.id)),
            "{kind}"
        );
        let listing = text(send(&other, shop_testapp::get_request(&to)).await).await;
        assert!(listing.contains("/c/boats"), "{kind}: the department list");
        assert!(matches!(
            app.state.catalogue().add(Some(added.id), &fields, 0).await,
            Err(CatalogueError::IdTaken(id)) if id == added.id
        ));
    }
}

#[tokio::test]
async fn a_retired_item_is_gone_from_every_page_and_refused_at_checkout() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let it = app.db.item(item(2)).await.unwrap().unwrap();
        app.rank(&[2]).await;
        cached(&app, "/items/2").await;
        cached(&app, "/items").await;
        let buyer = app.logged_in("rita").await;
        for line in ["item=2&count=1", "item=5&count=1"] {
            let resp = app.post("/cart", Some(&buyer), line, false).await;
            assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{kind}");
        }

        let search = format!("/search?q={}", it.title.split(' ').next().unwrap());
        let found = text(app.get(&search, None).await).await;
        assert!(found.contains("href=\"/items/2\""), "{kind}: found before");
        // A view still in this server's batch when the item is retired.
        app.flush_views().await;
        app.get("/items/2", Some(&buyer)).await;
        let applied = app.state.catalogue().retire(item(2)).await.unwrap();
        assert_eq!(applied.changed, [item(2)], "{kind}");
        app.flush_views().await;
        let other = app.second_server();
        let page = send(&other, shop_testapp::get_request("/items/2")).await;
        assert_eq!(page.status(), StatusCode::GONE, "{kind}");
        let insights = send(&other, shop_testapp::get_request("/api/items/2/insights")).await;
        assert_eq!(
            insights.status(),
            StatusCode::GONE,
            "{kind}: its insights too"
        );
        assert_eq!(json(insights).await["error"], "retired", "{kind}");
        for uri in ["/items", "/", search.as_str()] {
            let html = text(send(&other, shop_testapp::get_request(uri)).await).await;
            assert!(!html.contains("href=\"/items/2\""), "{kind} {uri}");
        }
        let ranked: Option<f64> = app.redis.conn().await.zscore("viewed:", 2).await.unwrap();
        assert_eq!(
            ranked, None,
            "{kind}: out of the ranking, the view held when it was retired too"
        );
        // The list of items whose views are not counted goes by itself, an hour
        // after the last retirement, if none follows to trim it.
        let ttl: i64 = app.redis.conn().await.ttl("unranked:").await.unwrap();
        assert!(
            (3_000..=3_600).contains(&ttl),
            "{kind}: unranked: lives {ttl} s"
        );

        // The cart shows it as gone and leaves it out of the total; checkout names
        // it, changes nothing, and adding it again is refused.
        let cart = text(app.get("/cart", Some(&buyer)).await).await;
        assert!(cart.contains("No longer available"), "{kind}");
        let five = app.db.item(item(5)).await.unwrap().unwrap();
        assert!(
            cart.contains(&format!("Total: <strong>{}", money(five.price_cents))),
            "{kind}"
        );
        let resp = app
            .post(
                "/checkout",
                Some(&buyer),
                &app.checkout_form(&buyer, "retired-1").await,
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let body = text(resp).await;
        assert!(
            body.contains("item 2") && body.contains("item_retired"),
            "{kind}: {body}"
        );
        assert_eq!(
            app.me(&buyer).await["cart"]["lines"]
                .as_array()
                .unwrap()
                .len(),
            2,
            "{kind}"
        );
        let again = app
            .post("/cart", Some(&buyer), "item=2&count=3", true)
            .await;
        assert_eq!(again.status(), StatusCode::CONFLICT, "{kind}");
        assert!(
            app.db.item(item(2)).await.unwrap().unwrap().title == it.title,
            "{kind}: kept"
        );

        // Removed from the cart, the rest checks out.
        app.post("/cart", Some(&buyer), "item=2&count=0", false)
            .await;
        let placed = app
            .post(
                "/checkout",
                Some(&buyer),
                &app.checkout_form(&buyer, "retired-2").await,
                true,
            )
            .await;
        assert_eq!(placed.status(), StatusCode::OK, "{kind}");

        // Sold again (an import names it): its views count again at once.
        let fields = ItemFields {
            title: it.title.clone(),
            description: it.description.clone(),
            price_cents: it.price_cents,
            category: it.category.clone(),
        };
        let applied = app
            .state
            .catalogue()
            .import_chunk(&[(item(2), fields, 5)], RetiredInImport::SellAgain)
            .await
            .unwrap();
        assert_eq!(applied.changed, [item(2)], "{kind}");
        app.get("/items/2", Some(&buyer)).await;
        app.flush_views().await;
        let ranked: Option<f64> = app.redis.conn().await.zscore("viewed:", 2).await.unwrap();
        assert_eq!(ranked, Some(-1.0), "{kind}: ranked again");
    }
}

#[tokio::test]
async fn checkout_charges_the_price_at_commit_not_the_page_seen() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paul").await;
        let page = text(app.get("/items/6", None).await).await;
        let old = app.db.item(item(6)).await.unwrap().unwrap().price_cents;
        assert!(page.contains(&money(old)), "{kind}");
        app.post("/cart", Some(&buyer), "item=6&count=2", false)
            .await;
        let edit = ItemEdit::new(None, None, Some(old + 1_000), None).unwrap();
        app.state
            .catalogue()
            .update(item(6), &edit, None)
            .await
            .unwrap();
        let cart = text(app.get("/cart", Some(&buyer)).await).await;
        assert!(
            cart.contains(&money(old + 1_000)),
            "{kind}: the cart shows today's price"
        );
        let placed = shop_testapp::json(
            app.post(
                "/checkout",
                Some(&buyer),
                &app.checkout_form(&buyer, "price-1").await,
                true,
            )
            .await,
        )
        .await;
        assert_eq!(placed["total_cents"], 2 * (old + 1_000), "{kind}: {placed}");
    }
}

#[tokio::test]
async fn an_admin_edits_an_item_in_the_browser_and_every_server_shows_it() {
    let app = TestApp::start().await;
    app.rank(&[3]).await;
    cached(&app, "/items/3").await;
    let before = app.db.item(item(3)).await.unwrap().unwrap();

    // Only admins: a guest is sent to log in (and back), a shopper refused.
    let guest = app.visitor().await;
    let resp = app.get("/admin/items/3", Some(&guest)).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()["location"], "/login?next=/admin/items/3");
    let shopper = app.logged_in("sam").await;
    assert_eq!(
        app.get("/admin/items/3", Some(&shopper)).await.status(),
        StatusCode::FORBIDDEN
    );
    let form = "title=Hacked&description=x&price_cents=1&category=kitchen";
    assert_eq!(
        app.post("/admin/items/3", Some(&shopper), form, false)
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    let admin = app.logged_in("ada").await;
    app.db.grant_admin("ada").await.unwrap();
    let page = app.get("/admin/items/3", Some(&admin)).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()["cache-control"], "private, no-store");
    assert!(text(page).await.contains(&before.title));
    assert_eq!(
        app.get("/admin/items/999", Some(&admin)).await.status(),
        StatusCode::NOT_FOUND
    );

    // Bad input: the form again with the reason, nothing changed.
    for bad in [
        "title=&description=x&price_cents=5&category=kitchen",
        "title=T&description=x&price_cents=-5&category=kitchen",
        "title=T&description=x&price_cents=lots&category=kitchen",
        "title=T&description=x&price_cents=5&category=a%2Fb",
    ] {
        let resp = app.post("/admin/items/3", Some(&admin), bad, false).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert!(text(resp).await.contains("id=\"message\""), "{bad}");
        // A client asking for JSON gets the shop's error shape, not the form.
        let resp = app.post("/admin/items/3", Some(&admin), bad, true).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{bad}");
        let body = json(resp).await;
        assert_eq!(body["error"], "bad_request", "{bad}: {body}");
    }
    // From another site: refused before anything runs.
    let cross = shop_testapp::form_post("/admin/items/3", Some(&admin), false)
        .header("sec-fetch-site", "cross-site")
        .body(axum::body::Body::from(
            "title=Evil&description=x&price_cents=1&category=kitchen",
        ))
        .unwrap();
    assert_eq!(app.send(cross).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(app.db.item(item(3)).await.unwrap().unwrap(), before);

    // A good edit: saved, and another server shows it at once.
    let good = format!(
        "title=Admin+kettle&description=Boils.&price_cents=2500&category={}",
        before.category
    );
    let resp = app.post("/admin/items/3", Some(&admin), &good, false).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()["location"], "/admin/items/3?saved=1");
    let other = app.second_server();
    let html = text(send(&other, shop_testapp::get_request("/items/3")).await).await;
    assert!(html.contains("Admin kettle") && html.contains(&money(2500)));

    // A form that leaves a field out leaves it as it is (from a JSON client:
    // the answer says it is saved, and the version it is at).
    let resp = app
        .post("/admin/items/3", Some(&admin), "price_cents=2600", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let saved = json(resp).await;
    assert_eq!(saved["saved"], true, "{saved}");
    let now = app.db.item(item(3)).await.unwrap().unwrap();
    assert_eq!(saved["version"], now.version, "{saved}");
    assert_eq!(
        (
            now.title.as_str(),
            now.description.as_str(),
            now.price_cents
        ),
        ("Admin kettle", "Boils.", 2600)
    );
    // Sent again unchanged (after a purge that failed, say): the pages go anyway.
    cached(&app, "/items/3").await;
    let same = format!(
        "title=Admin+kettle&price_cents=2600&category={}",
        before.category
    );
    app.post("/admin/items/3", Some(&admin), &same, false).await;
    assert_eq!(x_cache(&app.get("/items/3", None).await), "MISS");

    // Retired from the form.
    let resp = app
        .post("/admin/items/3/retire", Some(&admin), "", false)
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let gone = send(&other, shop_testapp::get_request("/items/3")).await;
    assert_eq!(gone.status(), StatusCode::GONE);
    // A page the same for everyone, but its error is of its moment: no cache
    // between the shop and the browser keeps it (the item may be sold again).
    let control = gone.headers()["cache-control"].to_str().unwrap();
    assert!(control.contains("no-store"), "{control}");
    let form = text(app.get("/admin/items/3?saved=1", Some(&admin)).await).await;
    assert!(form.contains("id=\"retired\"") && form.contains("id=\"saved\""));
}

/// Every item has one path: other spellings of it name no item (and so never
/// render a popular page outside the cache, nor make new cache entries).
#[tokio::test]
async fn an_item_has_one_path() {
    let app = TestApp::start().await;
    app.rank(&[1]).await;
    cached(&app, "/items/1").await;
    for other in [
        "/items/%31",
        "/items/01",
        "/items/+1",
        "/items/%2B1",
        "/items/1%20",
    ] {
        let resp = app.get(other, None).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{other}");
        let control = resp.headers()["cache-control"].to_str().unwrap();
        assert!(control.contains("no-store"), "{other}: {control}");
    }
    for other in ["/api/inventory/%31", "/api/flash/%31"] {
        let resp = app.get(other, None).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{other}");
    }
}

/// A retired item is no longer sold, on sale or not: retiring ends its flash
/// sale, in Redis and in the database, whichever decides the buys.
#[tokio::test]
async fn retiring_an_item_ends_its_flash_sale() {
    use shop_web::flash::FlashDecider;
    for decider in [FlashDecider::Redis, FlashDecider::Database] {
        let config = shop_web::WebConfig {
            flash_decider: decider,
            ..shop_web::WebConfig::default()
        };
        let app = TestApp::with_config(config).await;
        app.start_sale(2, 5, 100).await;
        let buyer = app.logged_in("bea").await;
        let buy = |key: &'static str| {
            shop_testapp::form_post("/api/flash/2/buy", Some(&buyer), true)
                .header("idempotency-key", key)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(
            app.send(buy("k1")).await.status(),
            StatusCode::OK,
            "{decider:?}"
        );
        app.state.catalogue().retire(item(2)).await.unwrap();
        let refused = app.send(buy("k2")).await;
        assert_eq!(refused.status(), StatusCode::CONFLICT, "{decider:?}");
        let body = shop_testapp::json(refused).await;
        assert_eq!(body["outcome"], "not_on_sale", "{decider:?}: {body}");
    }
}

/// The book's `_` parameter skips the page cache for an admin checking a page;
/// for anyone else it is ignored, or every request with `_=<random>` would be a
/// render and a trip to the database.
#[tokio::test]
async fn the_underscore_parameter_bypasses_the_cache_for_admins_only() {
    let app = TestApp::start().await;
    app.rank(&[4]).await;
    cached(&app, "/items/4").await;
    let guest = app.visitor().await;
    let shopper = app.logged_in("sam").await;
    for (who, cookie) in [
        ("anonymous", None),
        ("guest", Some(&guest)),
        ("shopper", Some(&shopper)),
    ] {
        for n in 0..3 {
            let resp = app
                .get(&format!("/items/4?_={n}"), cookie.map(String::as_str))
                .await;
            assert_eq!(x_cache(&resp), "HIT", "{who}");
        }
    }
    let admin = app.logged_in("ada").await;
    app.db.grant_admin("ada").await.unwrap();
    let resp = app.get("/items/4?_=1", Some(&admin)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(x_cache(&resp), "BYPASS");
    assert_eq!(
        x_cache(&app.get("/items/4", Some(&admin)).await),
        "HIT",
        "without _"
    );
}
