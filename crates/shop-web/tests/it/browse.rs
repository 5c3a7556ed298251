//! Browsing, search and sign-up through the router: keyset listings walked link by
//! link, the listing cache, search with hostile text, and new accounts.

use axum::http::{StatusCode, header};
use axum::response::Response;
use shop_web::WebConfig;

use shop_testapp::{ITEMS, TestApp, cookie_of, json, text};

/// The `/items/<id>` links of a page, in order.
fn item_links(html: &str) -> Vec<u64> {
    html.split("href=\"/items/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect()
}

/// The page's `rel="next"` link, if any (`&amp;` read back as `&`).
fn next_link(html: &str) -> Option<String> {
    let head = html.split(" rel=\"next\"").next()?;
    if head.len() == html.len() {
        return None;
    }
    let href = head.rsplit("href=\"").next()?.split('"').next()?;
    Some(href.replace("&amp;", "&"))
}

fn x_cache(resp: &Response) -> String {
    resp.headers()
        .get("x-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// Follows `rel="next"` from `start` to the end; every item id listed, in order.
async fn walk(app: &TestApp, start: &str) -> Vec<u64> {
    let mut seen = Vec::new();
    let mut uri = Some(start.to_owned());
    while let Some(u) = uri {
        let resp = app.get(&u, None).await;
        assert_eq!(resp.status(), StatusCode::OK, "{u}");
        let html = text(resp).await;
        seen.extend(item_links(&html));
        uri = next_link(&html);
    }
    seen
}

#[tokio::test]
async fn listings_walk_every_item_once_and_departments_hold_their_own() {
    let app = TestApp::start().await;
    let all = walk(&app, "/items").await;
    assert_eq!(all, (1..=ITEMS).collect::<Vec<_>>());

    let home = text(app.get("/", None).await).await;
    let categories = app.db.categories().await.unwrap();
    assert!(categories.len() > 1);
    for c in &categories {
        assert!(home.contains(&format!("href=\"/c/{c}\"")), "home links {c}");
        let want: Vec<u64> = app
            .db
            .items_page(Some(c), None, 1_000)
            .await
            .unwrap()
            .iter()
            .map(|it| it.id.get())
            .collect();
        assert!(!want.is_empty());
        assert_eq!(walk(&app, &format!("/c/{c}")).await, want, "{c}");
    }

    for (uri, status) in [
        ("/c/no-such-department", 404),
        ("/c/no-such-department?after=1", 404),
        (&format!("/c/{}", "x".repeat(101)), 404),
        ("/items?after=abc", 400),
        ("/items?after=0", 400),
        ("/items?after=-3", 400),
        ("/items?after=1.5", 400),
        // The same page spelled otherwise: a copy of its own at an edge.
        ("/items?after=%32", 400),
        ("/items?after=02", 400),
        ("/items?after=2&after=2", 400),
        ("/items?after=", 400),
        ("/c/kitchen?after=%31", 400),
    ] {
        assert_eq!(app.get(uri, None).await.status().as_u16(), status, "{uri}");
    }
    // A page the cache keeps, spelled otherwise: a 400 still, never the kept
    // page (its key reads `after` decoded; an edge keys by the URL as sent).
    app.get("/items?after=24", None).await;
    assert_eq!(x_cache(&app.get("/items?after=24", None).await), "HIT");
    for other in [
        "/items?after=%32%34",
        "/items?%61fter=24",
        "/items?after=24&after=24",
    ] {
        assert_eq!(app.get(other, None).await.status(), 400, "{other}");
    }
    // Past the end: an empty page that says so, with a way back.
    let end = text(app.get(&format!("/items?after={ITEMS}"), None).await).await;
    assert!(item_links(&end).is_empty() && end.contains("No more items"));
    assert!(next_link(&end).is_none());
    // ... and not kept: made-up `after` values cannot fill the cache.
    let again = app.get(&format!("/items?after={}", ITEMS + 7), None).await;
    assert_eq!(again.headers()["x-cache"], "MISS");
    let again = app.get(&format!("/items?after={}", ITEMS + 7), None).await;
    assert_eq!(again.headers()["x-cache"], "MISS");
}

/// A department's listing has the path its links spell, and the one other
/// spelling a browser or a proxy may send (the characters a path may hold
/// left plain: `&`, `'`); any other spelling (a letter percent-encoded, in
/// either case) names no department, so it is neither rendered nor kept: a
/// name has 3 to the power of its length of spellings, each a page cache entry.
#[tokio::test]
async fn a_department_has_one_path() {
    let app = TestApp::start().await;
    let department = app.db.categories().await.unwrap().remove(0);
    let own = format!("/c/{department}");
    assert_eq!(app.get(&own, None).await.status(), StatusCode::OK);
    let (first, rest) = department.split_at(1);
    let byte = first.as_bytes()[0];
    let mut others = vec![
        format!("/c/%{byte:02X}{rest}"),
        format!("/c/%{byte:02x}{rest}"),
        format!("/c/%{byte:02X}{rest}?after=1"),
    ];
    // Departments whose names need encoding.
    for (name, links, plain, other) in [
        (
            "home & garden",
            "/c/home%20%26%20garden",
            "/c/home%20&%20garden",
            "/c/hom%65%20%26%20garden",
        ),
        ("men's", "/c/men%27s", "/c/men's", "/c/m%65n's"),
        ("café", "/c/caf%C3%A9", "/c/caf%C3%A9", "/c/caf%c3%a9"),
    ] {
        let fields =
            shop_cache::domain::catalogue::ItemFields::new("Thing", "", 100, name).unwrap();
        app.db.add_item(None, &fields, 1).await.unwrap();
        assert_eq!(shop_web::browse::department_path(name), links);
        for path in [links, plain] {
            let resp = app.get(path, None).await;
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            assert!(text(resp).await.contains("Thing"), "{path}");
        }
        others.push(other.to_owned());
    }
    for other in others {
        let resp = app.get(&other, None).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{other}");
        assert_ne!(x_cache(&resp), "HIT", "{other}");
        let control = resp.headers()[header::CACHE_CONTROL].to_str().unwrap();
        assert!(control.contains("no-store"), "{other}: {control}");
        // Asked again: still not a page of its own.
        assert_eq!(app.get(&other, None).await.status(), StatusCode::NOT_FOUND);
    }
    // The department's own path is unchanged, and served from the cache.
    let again = app.get(&own, None).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(x_cache(&again), "HIT");
}

#[tokio::test]
async fn listing_pages_come_from_the_page_cache_the_same_for_everyone() {
    let app = TestApp::start().await;
    let guest = app.visitor().await;
    let user = app.logged_in("lena").await;
    let first = app.get("/items?after=24", Some(&guest)).await;
    assert_eq!(x_cache(&first), "MISS");
    let first = text(first).await;
    let second = app.get("/items?after=24", Some(&user)).await;
    assert_eq!(x_cache(&second), "HIT");
    assert_eq!(text(second).await, first, "nothing personal in a listing");
    assert!(!first.contains("lena"));
    // Other parameters do not make new entries; `after` does.
    let junk = app.get("/items?after=24&utm=1", None).await;
    assert_eq!(x_cache(&junk), "HIT");
    assert_eq!(x_cache(&app.get("/items?after=6", None).await), "MISS");
}

/// Only the pages the "next" links lead to are kept: an `after` that does not end
/// a page (a crawler's made-up one) is answered, but never stored, so a crawler
/// cannot make one cached page (and its tag index entries) per item.
#[tokio::test]
async fn only_listing_pages_the_next_links_reach_are_cached() {
    let app = TestApp::start().await;
    for after in [5, 25, 47] {
        for _ in 0..2 {
            let resp = app.get(&format!("/items?after={after}"), None).await;
            assert_eq!(resp.status(), 200);
            assert_eq!(x_cache(&resp), "MISS", "after={after}");
        }
    }
    // A department's next link, followed twice: kept.
    let home = text(app.get("/", None).await).await;
    let dept = home
        .split("href=\"/c/")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a department link")
        .to_owned();
    let page_one = text(app.get(&format!("/c/{dept}"), None).await).await;
    if let Some(next) = next_link(&page_one) {
        assert_eq!(x_cache(&app.get(&next, None).await), "MISS");
        assert_eq!(x_cache(&app.get(&next, None).await), "HIT", "{next}");
    }
    // The whole walk of the catalogue stores one page per page of it.
    walk(&app, "/items").await;
    let stored = app
        .redis
        .all_keys()
        .await
        .into_iter()
        .filter(|k| k.starts_with("cache:"))
        .count() as u64;
    assert!(
        stored <= ITEMS.div_ceil(24) + 4,
        "{stored} pages for {ITEMS} items"
    );
}

#[tokio::test]
async fn search_finds_ranked_pages_and_takes_any_text() {
    let app = TestApp::start().await;
    // Every item whose title has the word, and a next page when there are more.
    let items = app.db.items_page(None, None, 1_000).await.unwrap();
    let noun = items[0].title.split(' ').nth(1).unwrap().to_owned();
    let want: Vec<u64> = items
        .iter()
        .filter(|it| it.title.contains(&noun))
        .map(|it| it.id.get())
        .collect();
    let resp = app
        .get(&format!("/search?q={}", noun.to_lowercase()), None)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let html = text(resp).await;
    assert!(html.contains(&format!("value=\"{}\"", noun.to_lowercase())));
    let mut found = walk(&app, &format!("/search?q={noun}")).await;
    found.sort_unstable();
    assert_eq!(found, want);

    let long = "kettle+".repeat(142);
    for q in [
        "",
        "%22",
        "%22kettle",
        "kettle%22",
        "%27%3B%20DROP%20TABLE%20items%3B--",
        "kettle%20OR%20lamp",
        "NEAR(kettle)",
        "title%3Akettle",
        "kettle*",
        "-kettle",
        "%E6%9D%B1%E4%BA%AC%20caf%C3%A9",
        "%00",
        "%5C",
        "(((",
        "%25_%25",
        long.as_str(),
    ] {
        let resp = app.get(&format!("/search?q={q}"), None).await;
        assert_eq!(resp.status(), StatusCode::OK, "{q}");
        assert!(text(resp).await.contains("<h1>Search</h1>"), "{q}");
    }
    let empty = text(app.get("/search", None).await).await;
    assert!(empty.contains("Type a few words"));
    for (uri, status) in [
        (format!("/search?q={}", "x".repeat(1_001)), 400),
        ("/search?q=kettle&page=0".to_owned(), 400),
        ("/search?q=kettle&page=51".to_owned(), 400),
        ("/search?q=kettle&page=x".to_owned(), 400),
        ("/search?q=kettle&page=50".to_owned(), 200),
    ] {
        assert_eq!(app.get(&uri, None).await.status().as_u16(), status, "{uri}");
    }
    // What a visitor types is shown back escaped.
    let html = text(
        app.get("/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E", None)
            .await,
    )
    .await;
    assert!(
        html.contains("alert(1)") && !html.contains("<script>alert"),
        "{html}"
    );
}

#[tokio::test]
async fn sign_up_logs_in_with_the_guest_cart_and_refuses_bad_input() {
    let app = TestApp::start().await;
    let guest = app.visitor().await;
    app.post("/cart", Some(&guest), "item=4&count=3", false)
        .await;
    let users_before = users(&app).await;

    for (form, status, says) in [
        (
            "name=Bad%20Name&password=long-enough-pw",
            400,
            "lowercase letters",
        ),
        ("name=ab&password=long-enough-pw", 400, "3 to 32"),
        ("name=newbie&password=short", 400, "at least 10"),
        (
            "name=newbie&password=++++++++++++",
            400,
            "not one character repeated",
        ),
        ("name=&password=", 400, "3 to 32"),
        (
            "name=newbie&password=long-enough-pw&next=//evil.example",
            400,
            "next",
        ),
    ] {
        let resp = app.post("/signup", Some(&guest), form, false).await;
        assert_eq!(resp.status().as_u16(), status, "{form}");
        assert!(cookie_of(&resp).is_none(), "{form}: no new session");
        assert!(text(resp).await.contains(says), "{form}");
    }
    assert_eq!(users(&app).await, users_before, "nothing created");

    let page = text(app.get("/signup", Some(&guest)).await).await;
    let key = page
        .split("name=\"key\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form has a one-time key")
        .to_owned();
    let form = format!("name=newbie&password=long-enough-pw&next=/cart&key={key}");
    let first = app.post("/signup", Some(&guest), &form, false).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert_eq!(first.headers()[header::LOCATION], "/cart");
    let cookie = cookie_of(&first).expect("a new session");
    assert_ne!(cookie, guest, "the session moved to a fresh token");
    let me = app.me(&cookie).await;
    assert_eq!(me["user"]["name"], "newbie");
    assert_eq!(me["cart"]["count"], 3, "the guest cart came along");
    // The same form sent twice: one account, one session.
    let again = app.post("/signup", Some(&guest), &form, false).await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER);
    assert_eq!(cookie_of(&again).unwrap(), cookie);
    assert_eq!(users(&app).await, users_before + 1);
    // And the new account logs in like any other.
    let visitor = app.visitor().await;
    let login = app
        .post(
            "/login",
            Some(&visitor),
            "name=newbie&password=long-enough-pw",
            true,
        )
        .await;
    assert_eq!(login.status(), StatusCode::OK);

    // A taken name with another password is a 409 that logs nobody in.
    let visitor = app.visitor().await;
    let taken = app
        .post(
            "/signup",
            Some(&visitor),
            "name=newbie&password=another-password",
            true,
        )
        .await;
    assert_eq!(taken.status(), StatusCode::CONFLICT);
    assert!(cookie_of(&taken).is_none());
    assert_eq!(json(taken).await["error"], "name_taken");
    assert_eq!(users(&app).await, users_before + 1);
}

#[tokio::test]
async fn sign_ups_count_against_the_login_limits() {
    let app = TestApp::with_config(WebConfig {
        login_limits: shop_cache::login_limit::LoginLimits {
            per_address: 100,
            per_name: 2,
            window: std::time::Duration::from_secs(60),
            slow_down: None,
        },
        ..WebConfig::default()
    })
    .await;
    app.db.create_user("taken", "right-password").await.unwrap();
    let guest = app.visitor().await;
    for _ in 0..2 {
        let resp = app
            .post(
                "/signup",
                Some(&guest),
                "name=taken&password=guess-number-1",
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CONFLICT);
    }
    let checks = app.db.password_checks();
    let resp = app
        .post(
            "/signup",
            Some(&guest),
            "name=taken&password=right-password",
            true,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(resp.headers().contains_key(header::RETRY_AFTER));
    assert_eq!(app.db.password_checks(), checks, "refused before hashing");
}

async fn users(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM users")
        .fetch_one(app.db.pool())
        .await
        .unwrap()
}
