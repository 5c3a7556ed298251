//! The cart and checkout through the router: the cart form, bad input, the cart
//! limits, and checkout placing one order.

use axum::http::{StatusCode, header};
use shop_testapp::{TestApp, json, text};
use shop_web::WebConfig;

use crate::routes::content_type;

#[tokio::test]
async fn the_cart_form_adds_updates_and_removes() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    let resp = app
        .post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[header::LOCATION], "/cart");
    app.post("/cart", Some(&cookie), "item=5&count=1", false)
        .await;
    assert_eq!(app.me(&cookie).await["cart"]["count"], 3);

    let resp = app
        .post("/cart", Some(&cookie), "item=3&count=4", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = json(resp).await;
    assert_eq!(
        body["cart"][0],
        serde_json::json!({"item": 3, "quantity": 4})
    );

    app.post("/cart", Some(&cookie), "item=3&count=0", false)
        .await;
    let me = app.me(&cookie).await;
    assert_eq!(
        me["cart"]["lines"],
        serde_json::json!([{"item": 5, "quantity": 1}])
    );
    let page = text(app.get("/cart", Some(&cookie)).await).await;
    assert!(
        page.contains("/items/5") && !page.contains("/items/3\""),
        "{page}"
    );
}

/// The item page's "Add to cart" adds to what the cart holds: clicked twice,
/// the line holds two; set on the cart page, the line holds what was set.
#[tokio::test]
async fn the_item_pages_form_adds_to_the_line() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    let page = text(app.get("/items/3", Some(&cookie)).await).await;
    let start = page.find("id=\"add-to-cart\"").expect("the page's form");
    let form = &page[start..start + page[start..].find("</form>").unwrap()];
    let mut fields = Vec::new();
    for input in form.split("<input").skip(1) {
        let attr = |name: &str| {
            let at = input.find(&format!("{name}=\""))? + name.len() + 2;
            Some(input[at..at + input[at..].find('"')?].to_owned())
        };
        fields.push(format!(
            "{}={}",
            attr("name").unwrap(),
            attr("value").unwrap()
        ));
    }
    let form = fields.join("&");
    assert_eq!(form, "item=3&add=1&count=1");
    for quantity in [1, 2] {
        let resp = app.post("/cart", Some(&cookie), &form, false).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        let me = app.me(&cookie).await;
        assert_eq!(
            me["cart"]["lines"],
            serde_json::json!([{"item": 3, "quantity": quantity}])
        );
    }
    app.post("/cart", Some(&cookie), "item=3&count=7", false)
        .await;
    app.post("/cart", Some(&cookie), &form, false).await;
    assert_eq!(app.me(&cookie).await["cart"]["count"], 8);
}

#[tokio::test]
async fn bad_cart_input_is_a_4xx_and_changes_nothing() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    app.post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    let before = app.me(&cookie).await["cart"].clone();
    for (form, status, says) in [
        ("item=3&count=abc", 400, "whole number"),
        ("item=3&count=100", 400, "at most 99"),
        ("item=3&count=99999999999999999999999", 400, "whole number"),
        ("item=999&count=1", 404, "no such item"),
        ("item=abc&count=1", 400, "item"),
        ("item=0&count=1", 400, "item"),
        ("count=1", 400, "item"),
        ("item=3", 400, "count"),
        ("item=3&count=1&add=2", 400, "add is 1"),
        ("item=3&count=0&add=1", 400, "at least 1"),
        ("item=3&count=98&add=1", 409, "you can add 97 more"),
    ] {
        let resp = app.post("/cart", Some(&cookie), form, false).await;
        assert_eq!(resp.status().as_u16(), status, "{form}");
        assert!(
            content_type(&resp).starts_with("text/html"),
            "{form}: a page for a person"
        );
        let page = text(resp).await;
        assert!(page.contains(says), "{form}: {page}");
        let resp = app.post("/cart", Some(&cookie), form, true).await;
        assert_eq!(resp.status().as_u16(), status, "{form}");
        assert!(json(resp).await["message"].as_str().unwrap().contains(says));
    }
    assert_eq!(
        app.me(&cookie).await["cart"],
        before,
        "the cart is unchanged"
    );
}

#[tokio::test]
async fn checkout_turns_the_cart_into_one_order() {
    let app = TestApp::start().await;
    let guest = app.visitor().await;
    app.post("/cart", Some(&guest), "item=2&count=1", false)
        .await;
    let resp = app.post("/checkout", Some(&guest), "key=k1", false).await;
    assert_eq!(
        resp.headers()[header::LOCATION],
        "/login?next=/cart",
        "guests log in first"
    );

    let user = app.logged_in("olga").await;
    assert_eq!(
        app.post("/checkout", Some(&user), "key=k1", false)
            .await
            .status(),
        StatusCode::BAD_REQUEST,
        "empty cart"
    );
    app.post("/cart", Some(&user), "item=2&count=3", false)
        .await;
    app.post("/cart", Some(&user), "item=4&count=1", false)
        .await;
    let page = text(app.get("/cart", Some(&user)).await).await;
    let key = page
        .split("name=\"key\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        app.post("/checkout", Some(&user), "", false).await.status(),
        StatusCode::BAD_REQUEST
    );

    let resp = app
        .post(
            "/checkout",
            Some(&user),
            &app.checkout_form(&user, &key).await,
            true,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let placed = json(resp).await;
    assert_eq!(placed["outcome"], "placed");
    assert_eq!(
        app.me(&user).await["cart"]["count"],
        0,
        "the cart is emptied"
    );
    assert_eq!(placed["new"], true);
    // A repeated submit of the same form places nothing new, and leaves the cart
    // filled since alone: not emptied, not recorded as bought.
    app.post("/cart", Some(&user), "item=6&count=1", false)
        .await;
    let again = json(
        app.post("/checkout", Some(&user), &format!("key={key}"), true)
            .await,
    )
    .await;
    assert_eq!(again["order_id"], placed["order_id"]);
    assert_eq!(again["new"], false);
    // The same form sent again from the page (a reload) is told so: the page
    // after it says nothing was ordered now, not that the cart was placed.
    let resent = app
        .post("/checkout", Some(&user), &format!("key={key}"), false)
        .await;
    assert_eq!(resent.status(), StatusCode::SEE_OTHER);
    let location = resent.headers()[header::LOCATION].to_str().unwrap();
    assert_eq!(
        location,
        format!("/account?placed={}&again=1", placed["order_id"])
    );
    let account = text(app.get(location, Some(&user)).await).await;
    assert!(
        account.contains("id=\"placed\"") && account.contains("nothing was ordered now"),
        "{account}"
    );
    // A link naming an order that is not this user's says nothing of it.
    let other = text(app.get("/account?placed=999999", Some(&user)).await).await;
    assert!(!other.contains("id=\"placed\""), "{other}");
    let me = app.me(&user).await;
    assert_eq!(
        me["cart"]["lines"],
        serde_json::json!([{"item": 6, "quantity": 1}]),
        "the replay kept the cart: {me}"
    );
    let insights = json(app.get("/api/items/6/insights", None).await).await;
    assert_eq!(insights["buyers"], 0, "no order holds item 6: {insights}");

    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE kind = 'cart'")
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert_eq!(orders, 1);
    let lines = app
        .db
        .order_lines(placed["order_id"].as_i64().unwrap())
        .await
        .unwrap();
    let lines: Vec<(u64, i64)> = lines.iter().map(|(i, q, _)| (i.get(), *q)).collect();
    assert_eq!(lines, vec![(2, 3), (4, 1)]);
    let account = text(app.get("/account", Some(&user)).await).await;
    assert!(
        account.contains("Hello, olga") && account.contains(&format!("#{}", placed["order_id"]))
    );
}

#[tokio::test]
async fn checkout_refuses_more_than_the_stock() {
    let app = TestApp::start().await;
    let user = app.logged_in("pia").await;
    app.db
        .set_stock(shop_cache::domain::ItemId::new(6).unwrap(), 1)
        .await
        .unwrap();
    app.post("/cart", Some(&user), "item=6&count=2", false)
        .await;
    // The cart page says so before the shopper checks out.
    let page = text(app.get("/cart", Some(&user)).await).await;
    assert!(
        page.contains("<p class=\"line-note\">Only 1 left: lower its quantity to check out.</p>"),
        "{page}"
    );
    let resp = app
        .post(
            "/checkout",
            Some(&user),
            &app.checkout_form(&user, "x1").await,
            true,
        )
        .await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let body = json(resp).await;
    assert_eq!(body["outcome"], "changed", "{body}");
    assert_eq!(
        body["changes"],
        serde_json::json!([{"item": 6, "out_of_stock": true, "in_stock": 1}])
    );
    let said = body["message"].as_str().unwrap();
    assert!(
        said.starts_with("Only 1 of ") && said.ends_with("lower its quantity to check out."),
        "{said}"
    );
    assert_eq!(
        app.me(&user).await["cart"]["count"],
        2,
        "the cart stays for the user to fix"
    );
    // As a page: the cart, saying how many are left.
    let form = app.checkout_form(&user, "x2").await;
    let page = text(app.post("/checkout", Some(&user), &form, false).await).await;
    assert!(page.contains("Only 1 of "), "{page}");
    // Lowered to what is left, it is placed.
    app.post("/cart", Some(&user), "item=6&count=1", false)
        .await;
    let page = text(app.get("/cart", Some(&user)).await).await;
    assert!(!page.contains("line-note"), "{page}");
    let form = app.checkout_form(&user, "x3").await;
    let placed = json(app.post("/checkout", Some(&user), &form, true).await).await;
    assert_eq!(placed["outcome"], "placed", "{placed}");
}

/// The cart page says which lines checkout would refuse as they are, before
/// the shopper tries: an item out of stock, and one whose flash sale runs (its
/// units are sold only on the sale page). The others say nothing.
#[tokio::test]
async fn the_cart_page_says_which_lines_cannot_be_checked_out() {
    for app in TestApp::builder().start_on_every_database().await {
        let user = app.logged_in("quinn").await;
        for line in ["item=2&count=1", "item=7&count=1", "item=8&count=3"] {
            app.post("/cart", Some(&user), line, false).await;
        }
        let id = |n| shop_cache::domain::ItemId::new(n).unwrap();
        assert!(app.db.set_stock(id(7), 0).await.unwrap());
        app.start_sale(8, 5, 100).await;
        let page = text(app.get("/cart", Some(&user)).await).await;
        let note_of = |item: u64| {
            let row = page.split(&format!("<tr data-item=\"{item}\">")).nth(1)?;
            let row = row.split("</tr>").next()?;
            let note = row.split("<p class=\"line-note\">").nth(1)?;
            note.split("</p>").next().map(str::to_owned)
        };
        assert_eq!(note_of(2), None, "{}: {page}", app.kind());
        assert_eq!(
            note_of(7).as_deref(),
            Some("Out of stock: remove it to check out."),
            "{}: {page}",
            app.kind()
        );
        assert!(
            note_of(8).is_some_and(|note| note.starts_with("In a flash sale")),
            "{}: {page}",
            app.kind()
        );
        // What checkout says of the same cart.
        let form = app.checkout_form(&user, "q1").await;
        let resp = app.post("/checkout", Some(&user), &form, true).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT);
    }
}

#[tokio::test]
async fn zero_and_negative_counts_remove_the_line() {
    let app = TestApp::start().await;
    let cookie = app.visitor().await;
    app.post("/cart", Some(&cookie), "item=3&count=2", false)
        .await;
    app.post("/cart", Some(&cookie), "item=5&count=1", false)
        .await;
    let resp = app
        .post("/cart", Some(&cookie), "item=3&count=-1", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        json(resp).await["cart"],
        serde_json::json!([{"item": 5, "quantity": 1}])
    );
    let resp = app
        .post("/cart", Some(&cookie), "item=5&count=-99999", false)
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(app.me(&cookie).await["cart"]["count"], 0);
    // Removing an item that is not there (or does not exist) is harmless.
    let resp = app
        .post("/cart", Some(&cookie), "item=999&count=0", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_full_cart_refuses_another_item_with_409() {
    let app = TestApp::with_config(WebConfig {
        max_cart_lines: 3,
        ..WebConfig::default()
    })
    .await;
    let cookie = app.visitor().await;
    for item in 1..=3 {
        let resp = app
            .post(
                "/cart",
                Some(&cookie),
                &format!("item={item}&count=1"),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = app
        .post("/cart", Some(&cookie), "item=4&count=1", true)
        .await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let body = json(resp).await;
    assert_eq!(body["error"], "cart_full");
    assert!(body["message"].as_str().unwrap().contains("at most 3"));
    assert_eq!(
        app.me(&cookie).await["cart"]["lines"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // Changing a line already there still works.
    let resp = app
        .post("/cart", Some(&cookie), "item=2&count=5", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn one_address_starts_only_so_many_carts_and_a_refused_one_writes_nothing() {
    let config = WebConfig {
        cart_starts_per_minute: 3,
        trust_forwarded_for: true,
        ..WebConfig::default()
    };
    let app = TestApp::with_config(config).await;
    let post = |from: &str, cookie: Option<&str>, form: &str| {
        let req = shop_testapp::form_post("/cart", cookie, true)
            .header("x-forwarded-for", from)
            .body(axum::body::Body::from(form.to_owned()))
            .unwrap();
        app.send(req)
    };
    let sessions = || async {
        let n: u64 = redis::cmd("ZCARD")
            .arg(app.keys.recent_in(app.keys.shards().next().unwrap()))
            .query_async(&mut app.redis.conn().await)
            .await
            .unwrap();
        n
    };
    // Cookieless cart posts from one address: three carts, then 429.
    let mut first = None;
    for _ in 0..3 {
        let resp = post("198.51.100.7", None, "item=3&count=1").await;
        assert_eq!(resp.status(), StatusCode::OK);
        first = first.or(shop_testapp::cookie_of(&resp));
    }
    let before = sessions().await;
    let refused = post("198.51.100.7", None, "item=3&count=1").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    assert_eq!(sessions().await, before, "nothing written");

    // A cart already started takes more lines; another address starts its own.
    let first = first.expect("a cart's cookie");
    let more = post("198.51.100.7", Some(&first), "item=4&count=1").await;
    assert_eq!(more.status(), StatusCode::OK);
    let other = post("203.0.113.9", None, "item=3&count=1").await;
    assert_eq!(other.status(), StatusCode::OK);
    // A logged-in shopper's cart is not a new anonymous one.
    let user = app.logged_in("lena").await;
    let mine = post("198.51.100.7", Some(&user), "item=3&count=1").await;
    assert_eq!(mine.status(), StatusCode::OK);

    // IPv6: per /64, and the /56 around them holds 4 shares however many /64s.
    let mut started = 0;
    for n in 0..20u16 {
        let from = format!("2001:db8:0:{n:x}::1");
        if post(&from, None, "item=3&count=1").await.status() == StatusCode::OK {
            started += 1;
        }
    }
    assert_eq!(started, 12, "4 shares of 3 in one /56");
    // A /64 refused in its own block counts nothing in its /56 and /48: hammering
    // on, it leaves the rest of its /48 their share.
    for _ in 0..60 {
        post("2001:db8:6:100::1", None, "item=3&count=1").await;
    }
    let neighbour = post("2001:db8:6:200::1", None, "item=3&count=1").await;
    assert_eq!(neighbour.status(), StatusCode::OK);
}

/// A login whose guest cart's quantities, added to the account's, pass the most
/// of one item says how many units were cut, on the cart page and in a JSON
/// answer; a made-up link says nothing to a shopper with no line at the most.
#[tokio::test]
async fn a_login_that_cuts_guest_quantities_says_so() {
    let app = TestApp::start().await;
    let login = format!("name=finn&password={}", shop_testapp::PASSWORD);
    let finn = app.logged_in("finn").await;
    app.post("/cart", Some(&finn), "item=1&count=3", false)
        .await;
    let guest = app.visitor().await;
    app.post("/cart", Some(&guest), "item=1&count=98", false)
        .await;
    app.post("/cart", Some(&guest), "item=2&count=99", false)
        .await;
    let resp = app.post("/login", Some(&guest), &login, false).await;
    assert_eq!(resp.headers()[header::LOCATION], "/cart?cut=2");
    let finn = shop_testapp::cookie_of(&resp).unwrap();
    let page = text(app.get("/cart?cut=2", Some(&finn)).await).await;
    assert!(
        page.contains(
            "2 units of the cart you filled before logging in did not fit: a line holds at most 99"
        ),
        "{page}"
    );
    assert_eq!(
        app.me(&finn).await["cart"]["lines"],
        serde_json::json!([{"item": 1, "quantity": 99}, {"item": 2, "quantity": 99}])
    );
    let guest = app.visitor().await;
    app.post("/cart", Some(&guest), "item=2&count=5", false)
        .await;
    let resp = app.post("/login", Some(&guest), &login, true).await;
    assert_eq!(json(resp).await["cart_units_cut"], 5);
    // No line at the most, or more than a login could cut: no such notice.
    let dora = app.logged_in("dora").await;
    app.post("/cart", Some(&dora), "item=1&count=98", false)
        .await;
    for link in ["/cart?cut=1", "/cart?cut=4000000"] {
        let page = text(app.get(link, Some(&dora)).await).await;
        assert!(
            page.contains("/items/1") && !page.contains("did not fit"),
            "{link}: {page}"
        );
    }
    let page = text(app.get("/cart?cut=4000000", Some(&finn)).await).await;
    assert!(!page.contains("did not fit"), "{page}");
    // A guest never logged in: no such notice, whatever its cart holds.
    let guest = app.visitor().await;
    app.post("/cart", Some(&guest), "item=1&count=99", false)
        .await;
    let page = text(app.get("/cart?cut=1", Some(&guest)).await).await;
    assert!(
        page.contains("/items/1") && !page.contains("did not fit"),
        "{page}"
    );
}

/// A login whose guest cart does not fit the account's says so: the page goes
/// to the cart, which says how many lines were left out; a JSON login says it
/// in its answer; a link made up elsewhere says nothing to a shopper whose cart
/// has room.
#[tokio::test]
async fn a_login_that_leaves_guest_lines_out_says_so() {
    let app = TestApp::with_config(WebConfig {
        max_cart_lines: 3,
        ..WebConfig::default()
    })
    .await;
    let add = |cookie: String, items: &'static [u64]| {
        let app = &app;
        async move {
            for item in items {
                let form = format!("item={item}&count=1");
                let resp = app.post("/cart", Some(&cookie), &form, true).await;
                assert_eq!(resp.status(), StatusCode::OK, "item {item}");
            }
            cookie
        }
    };
    let erin = app.logged_in("erin").await;
    add(erin, &[1, 2]).await;
    let guest = add(app.visitor().await, &[3, 4, 5]).await;
    let login = format!("name=erin&password={}", shop_testapp::PASSWORD);
    let resp = app.post("/login", Some(&guest), &login, false).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[header::LOCATION], "/cart?left_out=2");
    let erin = shop_testapp::cookie_of(&resp).unwrap();
    let page = text(app.get("/cart?left_out=2", Some(&erin)).await).await;
    assert!(
        page.contains("2 lines of the cart you filled before logging in did not fit")
            && page.contains("at most 3 lines"),
        "{page}"
    );
    // No login leaves out more lines than a cart holds: such a link says nothing.
    let page = text(app.get("/cart?left_out=4000000000", Some(&erin)).await).await;
    assert!(
        page.contains("/items/3") && !page.contains("did not fit"),
        "{page}"
    );
    assert_eq!(
        app.me(&erin).await["cart"]["lines"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // A JSON login says it in its answer.
    let guest = add(app.visitor().await, &[4]).await;
    let resp = app.post("/login", Some(&guest), &login, true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["cart_lines_left_out"], 1);
    // Nothing left out: the login goes where it was going, and says nothing.
    let guest = add(app.visitor().await, &[1]).await;
    let resp = app.post("/login", Some(&guest), &login, false).await;
    assert_eq!(resp.headers()[header::LOCATION], "/");
    let resp = app
        .post("/login", Some(&app.visitor().await), &login, true)
        .await;
    assert!(json(resp).await.get("cart_lines_left_out").is_none());

    // A made-up link, to a shopper with room in the cart: no such notice.
    let dora = add(app.logged_in("dora").await, &[1]).await;
    let page = text(app.get("/cart?left_out=2", Some(&dora)).await).await;
    assert!(
        page.contains("/items/1") && !page.contains("did not fit"),
        "{page}"
    );
    let resp = app.get("/cart?left_out=two", Some(&dora)).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}
