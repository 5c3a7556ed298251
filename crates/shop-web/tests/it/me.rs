//! `/api/me`, asked for by every page view: a warm call reads no database, and a
//! catalogue change made by any web server shows in it at once.

use std::time::{Duration, Instant};

use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::ItemEdit;
use shop_testapp::TestApp;
use tokio_util::sync::CancellationToken;

/// The ids `/api/me` lists as recently viewed, newest first.
fn viewed_ids(me: &serde_json::Value) -> Vec<u64> {
    me["recently_viewed"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|it| it["id"].as_u64().unwrap())
        .collect()
}

/// The titles and prices `/api/me` lists as recently viewed.
fn recent(me: &serde_json::Value) -> Vec<(String, String)> {
    me["recently_viewed"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|it| {
            let field = |name: &str| it[name].as_str().unwrap_or_default().to_owned();
            (field("title"), field("price"))
        })
        .collect()
}

#[tokio::test]
async fn a_warm_call_reads_no_database_and_another_servers_change_shows_at_once() {
    let app = TestApp::start().await;
    let stop = CancellationToken::new();
    shop_testapp::run_tier_feed(&app.state, &stop).await;
    let cookie = app.logged_in("mia").await;
    for id in [3, 4] {
        app.get(&format!("/items/{id}"), Some(&cookie)).await;
    }
    app.flush_views().await;
    let item3 = app.db.item(ItemId::new(3).unwrap()).await.unwrap().unwrap();
    let cold = app.db.reads();
    let first = app.me(&cookie).await;
    assert!(app.db.reads() > cold, "a cold call reads the items");
    let warm = app.db.reads();
    assert_eq!(app.me(&cookie).await, first);
    assert_eq!(app.db.reads(), warm, "a warm call reads no database");
    assert_eq!(first["user"]["name"], "mia");
    let shown = recent(&first);
    assert_eq!(shown.len(), 2, "{first}");
    assert!(
        shown.iter().any(|(title, _)| *title == item3.title),
        "{first}"
    );

    // Another web server changes item 3: this one shows it on the next call.
    let other = app.second_state();
    let edit = ItemEdit {
        title: Some("Brand new kettle".into()),
        description: None,
        price_cents: Some(1_234),
        category: None,
    };
    other
        .catalogue()
        .update(item3.id, &edit, None)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let shown = recent(&app.me(&cookie).await);
        if shown.contains(&("Brand new kettle".into(), "$12.34".into())) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the change never showed: {shown:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Warm: with the database gone, the call still answers from memory (the
    // name, the titles and prices), and the cart still comes from Redis.
    app.db.close().await;
    let warm = app.get("/api/me", Some(&cookie)).await;
    assert_eq!(warm.status(), 200, "a warm call read the database");
    let warm = shop_testapp::json(warm).await;
    assert_eq!(warm["user"]["name"], "mia");
    assert!(recent(&warm).contains(&("Brand new kettle".into(), "$12.34".into())));
    stop.cancel();
}

#[tokio::test]
async fn a_cart_change_a_retirement_and_a_logout_show_at_the_next_call() {
    let app = TestApp::start().await;
    let stop = CancellationToken::new();
    shop_testapp::run_tier_feed(&app.state, &stop).await;
    let cookie = app.logged_in("noa").await;
    for id in [3, 4, 5] {
        app.get(&format!("/items/{id}"), Some(&cookie)).await;
    }
    app.flush_views().await;
    let me = app.me(&cookie).await;
    assert_eq!(me["user"]["name"], "noa");
    assert_eq!(me["cart"]["count"], 0);
    assert_eq!(viewed_ids(&me), vec![5, 4, 3], "{me}");

    // A cart change: the next call shows it (count and lines).
    let resp = app
        .post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    assert!(resp.status().is_redirection() || resp.status().is_success());
    let me = app.me(&cookie).await;
    assert_eq!(me["cart"]["count"], 2, "{me}");
    assert_eq!(me["cart"]["lines"][0]["item"], 3, "{me}");

    // Item 4 retired (its copy warm from the calls above): it leaves the list.
    app.state
        .catalogue()
        .retire(ItemId::new(4).unwrap())
        .await
        .unwrap();
    assert_eq!(viewed_ids(&app.me(&cookie).await), vec![5, 3]);

    // Logged out: the old cookie is nobody's.
    let resp = app.post("/logout", Some(&cookie), "", false).await;
    assert!(resp.status().is_redirection() || resp.status().is_success());
    let me = app.me(&cookie).await;
    assert!(me["user"].is_null(), "{me}");
    assert_eq!(me["cart"]["count"], 0, "{me}");
    assert!(viewed_ids(&me).is_empty(), "{me}");
    stop.cancel();
}

/// The ranking's count of `item` (`viewed:` counts down).
async fn views(app: &TestApp, item: u64) -> f64 {
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(app.keys.item_views())
        .arg(item)
        .query_async(&mut app.redis.conn().await)
        .await
        .unwrap();
    -score.unwrap_or(0.0)
}

/// `/api/me?item=N` (what the page's script sends when an edge served the page),
/// with `cookie` and `agent`.
async fn me_naming(
    app: &TestApp,
    item: &str,
    cookie: Option<&str>,
    agent: &str,
) -> axum::response::Response {
    agent_get(app, &format!("/api/me?item={item}"), cookie, agent).await
}

const BROWSER: &str =
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36";

#[tokio::test]
async fn the_item_a_pages_script_names_is_one_view_if_its_page_would_show() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;

    // A visitor: in the ranking and in the history, once.
    let resp = me_naming(&app, "3", Some(&cookie), BROWSER).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["cache-control"], "private, no-store");
    let me = shop_testapp::json(resp).await;
    assert_eq!(me["recently_viewed"][0]["id"], 3, "{me}");
    app.flush_views().await;
    assert_eq!(views(&app, 3).await, 1.0);

    // A visitor without a cookie yet (its first page): the ranking only, and
    // the cookie comes with the answer.
    let first = me_naming(&app, "4", None, BROWSER).await;
    assert!(shop_testapp::cookie_of(&first).is_some());
    // A bot: the ranking only.
    let bot = me_naming(&app, "4", Some(&cookie), "Googlebot/2.1").await;
    assert_eq!(bot.status(), 200);
    app.flush_views().await;
    assert_eq!(views(&app, 4).await, 2.0);
    let me = app.me(&cookie).await;
    assert!(
        me["recently_viewed"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["id"] != 4),
        "a bot's view is in no history: {me}"
    );

    // An item that does not exist, or is retired: no view, not in the history.
    let retired = ItemId::new(5).unwrap();
    app.state.catalogue().retire(retired).await.unwrap();
    for item in ["5", "999999"] {
        let resp = me_naming(&app, item, Some(&cookie), BROWSER).await;
        assert_eq!(resp.status(), 200);
    }
    app.flush_views().await;
    assert_eq!(views(&app, 5).await, 0.0);
    assert_eq!(views(&app, 999_999).await, 0.0);
    let history: Vec<u64> = app.me(&cookie).await["recently_viewed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_u64().unwrap())
        .collect();
    assert_eq!(history, vec![3]);

    // Something that is no item id: refused, nothing counted.
    let bad = me_naming(&app, "kettle", Some(&cookie), BROWSER).await;
    assert_eq!(bad.status(), 400);

    // The page's own request, served by the shop, counts; one the edge fetched
    // for its cache (`Shop-Edge`) does not: its script will name the item.
    let page = app.get("/items/6", Some(&cookie)).await;
    assert_eq!(page.status(), 200);
    let fetched = app
        .send(
            axum::http::Request::get("/items/7")
                .header("shop-edge", "1")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(fetched.status(), 200);
    app.flush_views().await;
    assert_eq!(views(&app, 6).await, 1.0);
    assert_eq!(views(&app, 7).await, 0.0);
}

/// A browser's GET of `uri` with `cookie`, as the page's script or the browser
/// sends it.
async fn browser_get(app: &TestApp, uri: &str, cookie: Option<&str>) -> axum::response::Response {
    agent_get(app, uri, cookie, BROWSER).await
}

/// [`browser_get`] by a client that calls itself `agent`.
async fn agent_get(
    app: &TestApp,
    uri: &str,
    cookie: Option<&str>,
    agent: &str,
) -> axum::response::Response {
    let mut req = axum::http::Request::get(uri).header(axum::http::header::USER_AGENT, agent);
    if let Some(cookie) = cookie {
        req = req.header(axum::http::header::COOKIE, cookie);
    }
    app.send(req.body(axum::body::Body::empty()).unwrap()).await
}

/// A new visitor's first item page found no session to put its view in: the
/// answer of its script's `/api/me` that hands out the session says so
/// (`new_session`), the script names the page's item (`seen=`), and the next
/// page lists it as recently viewed. The view counts once in the ranking; an
/// item that is no item, or retired, goes in no history.
#[tokio::test]
async fn a_new_visitors_first_page_is_in_the_history_the_next_page_shows() {
    let app = TestApp::start().await;
    let page = browser_get(&app, "/items/3", None).await;
    assert_eq!(page.status(), 200);
    let first = browser_get(&app, "/api/me?recent=6", None).await;
    let cookie = shop_testapp::cookie_of(&first).expect("the session's cookie");
    let me = shop_testapp::json(first).await;
    assert_eq!(me["new_session"], true, "{me}");
    assert_eq!(viewed_ids(&me), Vec::<u64>::new());

    let seen = browser_get(&app, "/api/me?recent=0&seen=3", Some(&cookie)).await;
    assert_eq!(seen.status(), 200);
    assert!(shop_testapp::cookie_of(&seen).is_none(), "the same session");
    let me = shop_testapp::json(seen).await;
    assert!(me.get("new_session").is_none(), "{me}");

    assert_eq!(
        browser_get(&app, "/items/4", Some(&cookie)).await.status(),
        200
    );
    app.flush_views().await;
    let me = shop_testapp::json(browser_get(&app, "/api/me?recent=6", Some(&cookie)).await).await;
    assert_eq!(viewed_ids(&me), vec![4, 3], "{me}");
    assert!(me.get("new_session").is_none(), "{me}");
    assert_eq!(views(&app, 3).await, 1.0, "counted with its page only");

    // No item, or a retired one: in no history. Something that is no item id:
    // refused (400). Without a session: nothing written.
    app.state
        .catalogue()
        .retire(ItemId::new(5).unwrap())
        .await
        .unwrap();
    for item in ["5", "999999"] {
        let uri = format!("/api/me?recent=0&seen={item}");
        assert_eq!(browser_get(&app, &uri, Some(&cookie)).await.status(), 200);
    }
    let bad = browser_get(&app, "/api/me?seen=kettle", Some(&cookie)).await;
    assert_eq!(bad.status(), 400);
    let me = shop_testapp::json(browser_get(&app, "/api/me", Some(&cookie)).await).await;
    assert_eq!(viewed_ids(&me), vec![4, 3], "{me}");
    let stranger = browser_get(&app, "/api/me?seen=6", None).await;
    let stranger = shop_testapp::cookie_of(&stranger).expect("a cookie");
    let me = shop_testapp::json(browser_get(&app, "/api/me", Some(&stranger)).await).await;
    assert_eq!(viewed_ids(&me), Vec::<u64>::new(), "{me}");
    app.flush_views().await;
    assert_eq!(views(&app, 6).await, 0.0);

    // A bot is told of no new session, and what it names goes in no history.
    const BOT: &str = "Googlebot/2.1";
    let first = agent_get(&app, "/api/me?recent=6", None, BOT).await;
    let bot = shop_testapp::cookie_of(&first).expect("a cookie");
    let me = shop_testapp::json(first).await;
    assert!(me.get("new_session").is_none(), "{me}");
    agent_get(&app, "/api/me?recent=0&seen=6", Some(&bot), BOT).await;
    let me = shop_testapp::json(agent_get(&app, "/api/me", Some(&bot), BOT).await).await;
    assert_eq!(viewed_ids(&me), Vec::<u64>::new(), "{me}");
}

/// While Redis stalls (here stopped, as a fork or a noisy neighbour stops it),
/// `/api/me` answers within the request's budget as for a guest, marked
/// `degraded`, instead of an error; once Redis is back, the shopper again.
#[tokio::test]
async fn a_stalled_session_store_answers_as_for_a_guest_marked_degraded() {
    let app = TestApp::builder()
        .redis_budget(Duration::from_millis(100))
        .start()
        .await;
    let cookie = app.logged_in("ivy").await;
    let cart = app
        .post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    assert_eq!(cart.status(), 303);
    let before = app.me(&cookie).await;
    assert_eq!(before["user"]["name"], "ivy");
    assert_eq!(before["cart"]["count"], 2);
    assert!(before.get("degraded").is_none(), "{before}");

    app.redis.pause();
    let started = Instant::now();
    let resp = app.get("/api/me", Some(&cookie)).await;
    let took = started.elapsed();
    let status = resp.status();
    let stalled = shop_testapp::json(resp).await;
    app.redis.resume();
    assert_eq!(status, 200, "{stalled}");
    assert_eq!(stalled["degraded"], true, "{stalled}");
    assert!(stalled["user"].is_null(), "{stalled}");
    assert_eq!(stalled["cart"]["count"], 0);
    // A few calls of 100 ms at most (a wide margin on two shared cores).
    assert!(took < Duration::from_secs(2), "{took:?}");

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let me = app.me(&cookie).await;
        if me.get("degraded").is_none() {
            assert_eq!(me["user"]["name"], "ivy");
            assert_eq!(me["cart"]["count"], 2, "nothing lost");
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {me}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A logged-in shopper's cart is the account's: once the process has seen the
/// session logged in, it reads that cart in the session's own round trip (one
/// node), so a change made anywhere shows at the next call; lines still in the
/// session's own cart (a merge its login left undone) are merged first and shown.
#[tokio::test]
async fn a_logged_in_shoppers_cart_is_the_accounts_and_a_merge_left_undone_is_finished() {
    use shop_cache::cart::CartOf;
    use shop_cache::domain::{SessionToken, UserId};

    let app = TestApp::start().await;
    let cookie = app.logged_in("noa").await;
    let token: SessionToken = cookie
        .split_once('=')
        .and_then(|(_, token)| token.parse().ok())
        .expect("a session cookie");
    let me = app.me(&cookie).await;
    assert_eq!(me["cart"]["count"], 0, "{me}");
    let user = UserId::new(me["user"]["id"].as_u64().expect("logged in")).unwrap();
    let item = |n: u64| ItemId::new(n).unwrap();
    let lines = |me: &serde_json::Value| -> Vec<(u64, u64)> {
        me["cart"]["lines"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|line| {
                (
                    line["item"].as_u64().unwrap(),
                    line["quantity"].as_u64().unwrap(),
                )
            })
            .collect()
    };

    // The account's cart changed behind this process's back: shown at once.
    app.state
        .carts
        .set(CartOf::Account(user), item(3), 2)
        .await
        .unwrap();
    let me = app.me(&cookie).await;
    assert_eq!(lines(&me), vec![(3, 2)], "{me}");
    app.state
        .carts
        .set(CartOf::Account(user), item(3), 0)
        .await
        .unwrap();
    app.state
        .carts
        .set(CartOf::Account(user), item(4), 1)
        .await
        .unwrap();
    assert_eq!(lines(&app.me(&cookie).await), vec![(4, 1)]);

    // A line left in the session's own cart: merged into the account's, shown.
    app.state.carts.set(&token, item(5), 2).await.unwrap();
    let me = app.me(&cookie).await;
    assert_eq!(lines(&me), vec![(4, 1), (5, 2)], "{me}");
    assert_eq!(me["cart"]["count"], 3, "{me}");
    assert!(
        app.state.carts.get(&token).await.unwrap().is_empty(),
        "merged"
    );
}

/// `?recent=N` lists only the `N` most recently viewed items (the pages' script
/// asks for the few it shows); a count it cannot be is refused, and nothing else
/// of the answer changes.
#[tokio::test]
async fn recent_lists_only_the_newest_items_asked_for() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    for id in [3, 4, 5] {
        app.get(&format!("/items/{id}"), Some(&cookie)).await;
    }
    app.flush_views().await;
    let get = |query: &'static str| {
        let (app, cookie) = (&app, &cookie);
        async move { app.get(&format!("/api/me{query}"), Some(cookie)).await }
    };
    assert_eq!(
        viewed_ids(&app.me(&cookie).await),
        vec![5, 4, 3],
        "all, without it"
    );
    for (query, want) in [
        ("?recent=2", vec![5, 4]),
        ("?recent=0", vec![]),
        ("?recent=25", vec![5, 4, 3]),
    ] {
        let resp = get(query).await;
        assert_eq!(resp.status(), 200, "{query}");
        let me = shop_testapp::json(resp).await;
        assert_eq!(viewed_ids(&me), want, "{query}: {me}");
        assert_eq!(me["cart"]["count"], 0, "{me}");
    }
    for query in ["?recent=26", "?recent=abc", "?recent=-1", "?recent="] {
        let resp = get(query).await;
        assert_eq!(resp.status(), 400, "{query}");
        let body = shop_testapp::json(resp).await;
        assert!(
            body["message"].as_str().unwrap().contains("recent"),
            "{query}: {body}"
        );
    }
    // What the pages' script asks for is what the shop means by it.
    let script = include_str!("../../../shop-web/assets/shop.js");
    let shown = shop_web::me::PAGE_RECENT - 1;
    assert!(
        script.contains(&format!("const RECENT_SHOWN = {shown};")),
        "shop.js asks for {shown} + 1"
    );
}

/// A per-user call refused for its query (400) changes nothing: its session is
/// not touched (its last request time stays) and an item it names is not viewed.
#[tokio::test]
async fn a_refused_per_user_call_touches_nothing() {
    use redis::AsyncCommands;
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    app.get("/items/3", Some(&cookie)).await;
    app.flush_views().await;
    let token: shop_cache::session::SessionToken =
        cookie.split_once('=').unwrap().1.parse().unwrap();
    let recent = app.keys.recent_of(&token).to_owned();
    let mut conn = app.conn.clone();
    let seen: f64 = conn.zscore(&recent, token.expose()).await.unwrap();
    // An earlier last request than any touch now would write.
    let earlier = seen - 60.0;
    let _: () = conn.zadd(&recent, token.expose(), earlier).await.unwrap();
    for query in [
        "?recent=abc",
        "?recent=26",
        "?item=abc",
        "?item=7&recent=99",
        "?recent=2&item=-7",
    ] {
        let resp = app.get(&format!("/api/me{query}"), Some(&cookie)).await;
        assert_eq!(resp.status(), 400, "{query}");
        assert!(
            shop_testapp::cookie_of(&resp).is_none(),
            "{query}: no new cookie"
        );
    }
    app.flush_views().await;
    let after: Option<f64> = conn.zscore(&recent, token.expose()).await.unwrap();
    assert_eq!(after, Some(earlier), "the session was not touched");
    assert_eq!(
        viewed_ids(&app.me(&cookie).await),
        vec![3],
        "item 7 not viewed"
    );
}
