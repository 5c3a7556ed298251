//! Checkout confirms what the shopper saw: the cart page's `cart_version` is
//! placed only while the cart and the database's prices still match it; otherwise
//! 409 says what changed, charges nothing and changes nothing; a placed order
//! takes exactly its own lines out of the cart.

use axum::http::StatusCode;
use shop_app::orders::{CartTakes, TAKE_AGAIN_FOR};
use shop_cache::domain::ItemId;
use shop_cache::domain::cart_version::CartVersion;
use shop_cache::domain::catalogue::ItemEdit;
use shop_db::orders::CheckoutOutcome;
use shop_testapp::{TestApp, cart_version_in, json, text};
use shop_web::templates::money;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// What must not have moved when a checkout was refused: the buyer's orders, the
/// item's stock and the cart.
async fn untouched(
    app: &TestApp,
    buyer: &str,
    stock_of: u64,
    stock: i64,
    cart: &serde_json::Value,
) {
    let kind = app.kind();
    let me = app.me(buyer).await;
    assert_eq!(&me["cart"]["lines"], cart, "{kind}: the cart as it was");
    let row = app.db.inventory_row(item(stock_of)).await.unwrap().unwrap();
    assert_eq!(row.stock, stock, "{kind}: no stock taken");
    let user = app.db.user_named("paula").await.unwrap().unwrap();
    assert!(
        app.db.orders_of(user, 10).await.unwrap().is_empty(),
        "{kind}: nothing ordered"
    );
}

/// A refused checkout names every line to fix at once: each line short of
/// stock with how many are left, beside the price that changed, on every
/// database; fixed, the order is placed at the next try.
#[tokio::test]
async fn a_refused_checkout_names_every_line_short_of_stock_at_once() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=6&count=2", false)
            .await;
        app.post("/cart", Some(&buyer), "item=7&count=3", false)
            .await;
        let shown = app.checkout_form(&buyer, "short-1").await;
        let seven = app.db.item(item(7)).await.unwrap().unwrap();
        app.db.set_stock(item(6), 1).await.unwrap();
        app.db.set_stock(item(7), 2).await.unwrap();
        // Short of stock alone: both lines named.
        let resp = app.post("/checkout", Some(&buyer), &shown, true).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let body = json(resp).await;
        assert_eq!(
            body["changes"],
            serde_json::json!([
                {"item": 6, "out_of_stock": true, "in_stock": 1},
                {"item": 7, "out_of_stock": true, "in_stock": 2},
            ]),
            "{kind}"
        );
        let said = body["message"].as_str().unwrap();
        assert!(
            said.contains("Only 1 of ") && said.contains(" is left") && said.contains("Only 2 of "),
            "{kind}: {said}"
        );
        // With a price changed too: the price and both shortages.
        let edit = ItemEdit::new(None, None, Some(seven.price_cents + 100), None).unwrap();
        app.state
            .catalogue()
            .update(item(7), &edit, None)
            .await
            .unwrap();
        let resp = app.post("/checkout", Some(&buyer), &shown, true).await;
        let body = json(resp).await;
        assert_eq!(
            body["changes"],
            serde_json::json!([
                {"item": 6, "out_of_stock": true, "in_stock": 1},
                {"item": 7, "was_cents": seven.price_cents, "now_cents": seven.price_cents + 100,
                 "out_of_stock": true, "in_stock": 2},
            ]),
            "{kind}"
        );
        let said = body["message"].as_str().unwrap();
        assert!(
            said.contains("went up") && said.contains("Only 2 of "),
            "{kind}: {said}"
        );
        // Both lowered: placed.
        app.post("/cart", Some(&buyer), "item=6&count=1", false)
            .await;
        app.post("/cart", Some(&buyer), "item=7&count=2", false)
            .await;
        let form = app.checkout_form(&buyer, "short-2").await;
        let placed = json(app.post("/checkout", Some(&buyer), &form, true).await).await;
        assert_eq!(placed["outcome"], "placed", "{kind}: {placed}");
    }
}

/// A line added in another tab since the page, and short of stock: the
/// answer says both.
#[tokio::test]
async fn a_line_added_since_and_short_of_stock_is_said_to_be_both() {
    let app = TestApp::start().await;
    let buyer = app.logged_in("paula").await;
    app.post("/cart", Some(&buyer), "item=6&count=1", false)
        .await;
    let shown = app.checkout_form(&buyer, "both-1").await;
    app.post("/cart", Some(&buyer), "item=7&count=3", false)
        .await;
    app.db.set_stock(item(7), 2).await.unwrap();
    let body = json(app.post("/checkout", Some(&buyer), &shown, true).await).await;
    assert_eq!(body["changes"][0]["item"], 7, "{body}");
    assert_eq!(body["changes"][0]["added"], true, "{body}");
    assert_eq!(body["changes"][0]["in_stock"], 2, "{body}");
    let said = body["message"].as_str().unwrap();
    assert!(
        said.contains("was added to your cart") && said.contains("Only 2 of "),
        "{said}"
    );
}

#[tokio::test]
async fn a_price_rise_between_the_cart_page_and_the_click_is_asked_about_not_charged() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=5&count=2", false)
            .await;
        let five = app.db.item(item(5)).await.unwrap().unwrap();
        let stock = app.db.inventory_row(item(5)).await.unwrap().unwrap().stock;
        let shown = app.checkout_form(&buyer, "rise-1").await;
        let cart = app.me(&buyer).await["cart"]["lines"].clone();

        let edit = ItemEdit::new(None, None, Some(999_999), None).unwrap();
        app.state
            .catalogue()
            .update(item(5), &edit, None)
            .await
            .unwrap();

        let resp = app.post("/checkout", Some(&buyer), &shown, true).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let body = json(resp).await;
        assert_eq!(body["outcome"], "changed", "{kind}: {body}");
        assert_eq!(
            body["changes"],
            serde_json::json!([{"item": 5, "was_cents": five.price_cents, "now_cents": 999_999}]),
            "{kind}"
        );
        assert_eq!(body["cart_version"], "5:2:999999", "{kind}");
        untouched(&app, &buyer, 5, stock, &cart).await;

        // As a page: the cart again, saying what changed, with a new confirm button.
        let resp = app.post("/checkout", Some(&buyer), &shown, false).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let page = text(resp).await;
        let said = format!(
            "The price of {} went up from {} to {}.",
            five.title,
            money(five.price_cents),
            money(999_999)
        );
        assert!(page.contains(&said), "{kind}: {page}");
        assert_eq!(
            cart_version_in(&page).as_deref(),
            Some("5:2:999999"),
            "{kind}"
        );
        untouched(&app, &buyer, 5, stock, &cart).await;

        // Confirmed at the new price, it is placed at that price, once.
        let confirm = format!(
            "key=rise-2&cart_version={}",
            body["cart_version"].as_str().unwrap()
        );
        let placed = json(app.post("/checkout", Some(&buyer), &confirm, true).await).await;
        assert_eq!(placed["outcome"], "placed", "{kind}: {placed}");
        assert_eq!(placed["total_cents"], 2 * 999_999, "{kind}");
        let replay = json(app.post("/checkout", Some(&buyer), &confirm, true).await).await;
        assert_eq!(
            replay["order_id"], placed["order_id"],
            "{kind}: a replay answers the order"
        );
        assert_eq!(replay["new"], false, "{kind}");
    }
}

#[tokio::test]
async fn a_line_added_in_another_tab_is_not_ordered_unseen() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=5&count=1", false)
            .await;
        let shown = app.checkout_form(&buyer, "tab-1").await;
        // The other tab.
        app.post("/cart", Some(&buyer), "item=7&count=3", false)
            .await;
        let seven = app.db.item(item(7)).await.unwrap().unwrap();
        let stock = app.db.inventory_row(item(7)).await.unwrap().unwrap().stock;
        let cart = app.me(&buyer).await["cart"]["lines"].clone();

        let resp = app.post("/checkout", Some(&buyer), &shown, true).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let body = json(resp).await;
        assert_eq!(
            body["changes"],
            serde_json::json!([{"item": 7, "now_cents": seven.price_cents, "now_quantity": 3, "added": true}]),
            "{kind}"
        );
        untouched(&app, &buyer, 7, stock, &cart).await;

        // A line removed in the other tab, or its quantity changed, is asked about too.
        let shown = app.checkout_form(&buyer, "tab-2").await;
        app.post("/cart", Some(&buyer), "item=5&count=0", false)
            .await;
        app.post("/cart", Some(&buyer), "item=7&count=1", false)
            .await;
        let body = json(app.post("/checkout", Some(&buyer), &shown, true).await).await;
        assert_eq!(
            body["changes"],
            serde_json::json!([
                {"item": 5, "removed": true},
                {"item": 7, "was_quantity": 3, "now_quantity": 1}
            ]),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn a_checkout_without_a_cart_version_or_with_a_bad_one_orders_nothing() {
    let app = TestApp::start().await;
    let buyer = app.logged_in("paula").await;
    app.post("/cart", Some(&buyer), "item=5&count=2", false)
        .await;
    let five = app.db.item(item(5)).await.unwrap().unwrap();
    let stock = app.db.inventory_row(item(5)).await.unwrap().unwrap().stock;
    let cart = app.me(&buyer).await["cart"]["lines"].clone();

    // An API client that confirmed nothing is shown what it would buy.
    let resp = app.post("/checkout", Some(&buyer), "key=api-1", true).await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let mut body = json(resp).await;
    let said = body.as_object_mut().unwrap().remove("message").unwrap();
    let said = said.as_str().unwrap();
    assert!(
        said.starts_with(&format!(
            "{} was added to your cart since you saw it: 2 at $",
            five.title
        )),
        "{said}"
    );
    assert_eq!(
        body,
        serde_json::json!({
            "outcome": "changed",
            "cart_version": format!("5:2:{}", five.price_cents),
            "changes": [{"item": 5, "now_cents": five.price_cents, "now_quantity": 2, "added": true}],
        })
    );
    untouched(&app, &buyer, 5, stock, &cart).await;

    for bad in ["5:2", "5:two:100", "0:1:1", "5:2:100;5:2:100", "<script>"] {
        let form = format!("key=api-2&cart_version={bad}");
        let resp = app.post("/checkout", Some(&buyer), &form, true).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert!(text(resp).await.contains("cart_version"), "{bad}");
    }
    untouched(&app, &buyer, 5, stock, &cart).await;

    // Confirmed, it is placed.
    let form = format!(
        "key=api-3&cart_version={}",
        body["cart_version"].as_str().unwrap()
    );
    let placed = json(app.post("/checkout", Some(&buyer), &form, true).await).await;
    assert_eq!(placed["total_cents"], 2 * five.price_cents, "{placed}");
}

#[tokio::test]
async fn a_page_whose_cart_another_tab_ordered_is_told_so_and_the_order_is_not_repeated() {
    let app = TestApp::start().await;
    let buyer = app.logged_in("paula").await;
    app.post("/cart", Some(&buyer), "item=5&count=1", false)
        .await;
    let first_tab = app.checkout_form(&buyer, "tab-a").await;
    let second_tab = app.checkout_form(&buyer, "tab-b").await;
    let placed = json(app.post("/checkout", Some(&buyer), &first_tab, true).await).await;
    assert_eq!(placed["outcome"], "placed", "{placed}");
    let resp = app.post("/checkout", Some(&buyer), &second_tab, true).await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let mut body = json(resp).await;
    let said = body.as_object_mut().unwrap().remove("message").unwrap();
    assert!(
        said.as_str().unwrap().contains("is no longer in your cart"),
        "{said}"
    );
    assert_eq!(
        body,
        serde_json::json!({"outcome": "changed", "cart_version": "", "changes": [{"item": 5, "removed": true}]})
    );
    // As a page: the shopper is told where an order that took it would be.
    let resp = app
        .post("/checkout", Some(&buyer), &second_tab, false)
        .await;
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let page = text(resp).await;
    assert!(
        page.contains("is no longer in your cart (if an order of yours took it, your account page lists that order)."),
        "{page}"
    );
    let user = app.db.user_named("paula").await.unwrap().unwrap();
    assert_eq!(app.db.orders_of(user, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_placed_order_takes_only_its_own_lines_out_of_the_cart() {
    let app = TestApp::start().await;
    let buyer = app.logged_in("paula").await;
    // Logged in: the account's cart.
    let user = app.db.user_named("paula").await.unwrap().unwrap();
    let cart = shop_cache::cart::CartOf::Account(user);
    app.post("/cart", Some(&buyer), "item=5&count=2", false)
        .await;
    app.post("/cart", Some(&buyer), "item=6&count=1", false)
        .await;
    // What an order of 5x2 and 6x1 takes, once the shopper (in another tab, while
    // the order committed) has added item 7 and changed item 6 to 4.
    app.post("/cart", Some(&buyer), "item=7&count=1", false)
        .await;
    app.post("/cart", Some(&buyer), "item=6&count=4", false)
        .await;
    let taken = app
        .state
        .carts
        .take(cart, &[(item(5), 2), (item(6), 1)])
        .await
        .unwrap();
    assert_eq!(taken, 1);
    assert_eq!(
        app.me(&buyer).await["cart"]["lines"],
        serde_json::json!([{"item": 6, "quantity": 4}, {"item": 7, "quantity": 1}])
    );
}

/// An order whose lines could not leave the cart after its commit (Redis failed
/// right there, or the server died) never has them ordered again: the next
/// checkout takes them out first and answers that the cart changed; the
/// workers' sweep takes them out for a shopper who does not check out again,
/// and again until the order is a few seconds old, then marks it taken; and an
/// order's lines leave once, so a line added again since stays.
#[tokio::test]
async fn lines_an_order_could_not_take_out_of_the_cart_are_never_ordered_again() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        let user = app.db.user_named("paula").await.unwrap().unwrap();
        let now = shop_db::unix_now();
        // What a checkout leaves when Redis fails right after its commit: the
        // order placed, its lines still in the cart.
        let committed_not_taken = |key: &'static str, lines: Vec<(ItemId, u32)>| {
            let app = &app;
            let buyer = buyer.clone();
            async move {
                let shown = app.cart_version(&buyer).await;
                let shown = CartVersion::parse(&shown).unwrap();
                let placed = app.db.checkout(user, &lines, &shown, key, now).await;
                assert!(
                    matches!(placed.unwrap(), CheckoutOutcome::Placed { new: true, .. }),
                    "{kind}"
                );
            }
        };
        app.post("/cart", Some(&buyer), "item=5&count=2", false)
            .await;
        committed_not_taken("first", vec![(item(5), 2)]).await;
        // The cart page still shows the line; the shopper confirms it again.
        let again = app.checkout_form(&buyer, "second").await;
        let resp = app.post("/checkout", Some(&buyer), &again, true).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let body = json(resp).await;
        assert_eq!(
            body["changes"],
            serde_json::json!([{"item": 5, "removed": true}]),
            "{kind}: {body}"
        );
        assert_eq!(app.db.orders_of(user, 10).await.unwrap().len(), 1, "{kind}");
        assert_eq!(
            app.me(&buyer).await["cart"]["lines"],
            serde_json::json!([]),
            "{kind}"
        );

        // A shopper who does not check out again: the sweep takes the lines.
        app.post("/cart", Some(&buyer), "item=6&count=1", false)
            .await;
        committed_not_taken("third", vec![(item(6), 1)]).await;
        let mut sweep = CartTakes::new(app.db.clone(), app.state.carts.clone());
        let taken = sweep.step(now).await.unwrap();
        assert_eq!(
            (taken.read, taken.old.len()),
            (2, 0),
            "{kind}: both too new to mark"
        );
        assert_eq!(
            app.me(&buyer).await["cart"]["lines"],
            serde_json::json!([]),
            "{kind}"
        );
        // Redis loses the take (a crash before its append-only file had it):
        // the line is back, and the record that it was taken is gone.
        let mut redis = app.redis.conn().await;
        let _: () = redis::pipe()
            .del(app.keys.user_cart_takes(user))
            .hset(app.keys.user_cart(user), 6, 1)
            .query_async(&mut redis)
            .await
            .unwrap();
        // Taken again until they are old enough, then marked: read no more.
        let later = now + TAKE_AGAIN_FOR.as_secs() as i64;
        let taken = sweep.step(later).await.unwrap();
        assert_eq!((taken.read, taken.old.len()), (2, 2), "{kind}");
        assert_eq!(
            app.me(&buyer).await["cart"]["lines"],
            serde_json::json!([]),
            "{kind}"
        );
        assert_eq!(
            sweep.step(later).await.unwrap().read,
            0,
            "{kind}: done once"
        );
        // The same item bought again: the first order's take, done again,
        // leaves it.
        app.post("/cart", Some(&buyer), "item=6&count=1", false)
            .await;
        let orders = app.db.orders_of(user, 10).await.unwrap();
        let order = orders.iter().max_by_key(|order| order.id).unwrap();
        let again = app
            .state
            .carts
            .take_order(user, (order.id, order.created_at), &[(item(6), 1)], now)
            .await
            .unwrap();
        assert_eq!(again, None, "{kind}");
        assert_eq!(
            app.me(&buyer).await["cart"]["lines"],
            serde_json::json!([{"item": 6, "quantity": 1}]),
            "{kind}"
        );
    }
}

/// The database's write path held where a checkout of item 5 waits for it:
/// SQLite's one write connection, or PostgreSQL's lock on item 5's stock row.
enum Held {
    Sqlite(#[allow(dead_code)] shop_db::write::WriteTx),
    Postgres(sqlx::Transaction<'static, sqlx::Any>),
}

impl Held {
    async fn take(app: &TestApp) -> Self {
        if app.kind() == "sqlite" {
            return Held::Sqlite(app.db.begin_write().await.unwrap());
        }
        let mut tx = app.db.pool().begin().await.unwrap();
        sqlx::query("SELECT stock FROM inventory WHERE item_id = 5 FOR UPDATE")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        Held::Postgres(tx)
    }

    async fn release(self) {
        match self {
            Held::Sqlite(tx) => drop(tx),
            Held::Postgres(tx) => tx.commit().await.unwrap(),
        }
    }
}

/// A checkout of paula's cart (`buyer` is her cookie) with `body`, sent in a task of its own (as JSON if
/// `json`), once it holds the cart: it waits then on the database `Held` by the
/// test.
async fn checkout_waiting_on_the_database(
    app: &TestApp,
    buyer: &str,
    body: String,
    json: bool,
) -> tokio::task::JoinHandle<axum::response::Response> {
    let user = app.db.user_named("paula").await.unwrap().unwrap();
    let hold = app.keys.user_checkout_hold(user);
    let first = checkout_in_background(app, buyer, body, json);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let held: bool = redis::cmd("EXISTS")
            .arg(&hold)
            .query_async(&mut app.redis.conn().await)
            .await
            .unwrap();
        if held {
            return first;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: the checkout never held the cart",
            app.kind()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Waits until a checkout has found the cart held and waits for it: it asks
/// Redis whether the cart is still held (`EXISTS`) more often than `before`.
async fn until_a_checkout_waits_for_the_cart(app: &TestApp, before: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while exists_calls(app).await <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "{}: no checkout waited for the cart",
            app.kind()
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// How many `EXISTS` Redis has answered so far.
async fn exists_calls(app: &TestApp) -> u64 {
    app.command_calls()
        .await
        .get("exists")
        .copied()
        .unwrap_or(0)
}

/// The same request as `checkout_waiting_on_the_database`, sent in a task of its
/// own at once (it waits for the cart).
fn checkout_in_background(
    app: &TestApp,
    buyer: &str,
    body: String,
    json: bool,
) -> tokio::task::JoinHandle<axum::response::Response> {
    let router = app.router.clone();
    let request = shop_testapp::form_post("/checkout", Some(buyer), json)
        .body(axum::body::Body::from(body))
        .unwrap();
    tokio::spawn(async move { shop_testapp::send(&router, request).await })
}

/// While one checkout waits for the database (after it read the cart), a second
/// checkout of the same cart from another tab waits for it, and is then told
/// what changed (its lines were ordered); a line added meanwhile stays in the
/// cart: one order, of the lines the first one read.
#[tokio::test]
async fn a_checkout_in_flight_holds_its_cart_and_a_line_added_meanwhile_stays() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=5&count=2", false)
            .await;
        let version = app.cart_version(&buyer).await;

        let held = Held::take(&app).await;
        let first = checkout_waiting_on_the_database(
            &app,
            &buyer,
            format!("key=tab-1&cart_version={version}"),
            true,
        )
        .await;
        // The other tab: the same cart, another key.
        let before = exists_calls(&app).await;
        let second = checkout_in_background(
            &app,
            &buyer,
            format!("key=tab-2&cart_version={version}"),
            true,
        );
        until_a_checkout_waits_for_the_cart(&app, before).await;
        app.post("/cart", Some(&buyer), "item=7&count=1", false)
            .await;
        assert!(
            !second.is_finished(),
            "{kind}: the second tab waits for the first checkout"
        );
        held.release().await;

        let placed = json(first.await.unwrap()).await;
        assert_eq!(placed["outcome"], "placed", "{kind}: {placed}");
        assert_eq!(placed["new"], true, "{kind}");
        let second = second.await.unwrap();
        assert_eq!(second.status(), StatusCode::CONFLICT, "{kind}");
        let told = json(second).await;
        assert_eq!(told["outcome"], "changed", "{kind}: {told}");
        assert_eq!(
            app.me(&buyer).await["cart"]["lines"],
            serde_json::json!([{"item": 7, "quantity": 1}]),
            "{kind}: the line added during the order stays; the ordered one is gone"
        );
        let user = app.db.user_named("paula").await.unwrap().unwrap();
        assert_eq!(app.db.orders_of(user, 10).await.unwrap().len(), 1, "{kind}");
    }
}

/// A double click on "Check out" sends the form twice at once: both answers lead
/// to the one order it placed (the browser shows the last), not to an error page.
#[tokio::test]
async fn a_double_click_is_answered_with_the_one_order_it_placed() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=5&count=2", false)
            .await;
        let form = app.checkout_form(&buyer, "double-1").await;

        let held = Held::take(&app).await;
        let first = checkout_waiting_on_the_database(&app, &buyer, form.clone(), false).await;
        let before = exists_calls(&app).await;
        let second = checkout_in_background(&app, &buyer, form, false);
        until_a_checkout_waits_for_the_cart(&app, before).await;
        held.release().await;

        let mut answers = Vec::new();
        for answer in [first.await.unwrap(), second.await.unwrap()] {
            assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{kind}");
            answers.push(answer.headers()["location"].to_str().unwrap().to_owned());
        }
        let user = app.db.user_named("paula").await.unwrap().unwrap();
        let orders = app.db.orders_of(user, 10).await.unwrap();
        assert_eq!(orders.len(), 1, "{kind}: one order");
        let id = orders[0].id;
        assert_eq!(
            answers,
            [
                format!("/account?placed={id}"),
                format!("/account?placed={id}&again=1")
            ],
            "{kind}"
        );
    }
}

/// A shopper whose connection drops while the checkout waits for the database
/// (the request's work is dropped with it) gets the order placed all the same,
/// and the cart let go: the same form sent again is answered with that order at
/// once, not "another checkout is in progress" for half a minute.
#[tokio::test]
async fn a_checkout_whose_shopper_went_away_is_placed_and_lets_the_cart_go() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=5&count=2", false)
            .await;
        let form = app.checkout_form(&buyer, "gone-1").await;

        let held = Held::take(&app).await;
        let gone = checkout_waiting_on_the_database(&app, &buyer, form.clone(), true).await;
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled(), "{kind}");
        held.release().await;

        let resp = app.post("/checkout", Some(&buyer), &form, true).await;
        assert_eq!(resp.status(), StatusCode::OK, "{kind}");
        let placed = json(resp).await;
        assert_eq!(placed["outcome"], "placed", "{kind}: {placed}");
        assert_eq!(
            placed["new"], false,
            "{kind}: placed by the request that went away"
        );
        let user = app.db.user_named("paula").await.unwrap().unwrap();
        let orders = app.db.orders_of(user, 10).await.unwrap();
        assert_eq!(orders.len(), 1, "{kind}");
        assert_eq!(placed["order_id"], orders[0].id, "{kind}");
        assert_eq!(
            app.me(&buyer).await["cart"]["lines"],
            serde_json::json!([]),
            "{kind}: the ordered lines left the cart"
        );
    }
}

/// While an item's flash sale runs, its units are the sale's: a cart holding it
/// is not checked out at the regular price, past the sale's limit per account
/// (409 `on_sale`, naming it and the sale page; nothing ordered, no stock
/// taken), nor is the item added to a cart. Once the sale is over, the same
/// cart is checked out.
#[tokio::test]
async fn a_cart_holding_an_item_whose_flash_sale_runs_is_not_checked_out() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=5&count=2", false)
            .await;
        app.post("/cart", Some(&buyer), "item=6&count=3", false)
            .await;
        assert!(app.db.set_stock(item(6), 10).await.unwrap());
        app.start_sale(6, 3, 100).await;
        let stock = app.db.inventory_row(item(5)).await.unwrap().unwrap().stock;
        let cart = app.me(&buyer).await["cart"]["lines"].clone();
        let shown = app.checkout_form(&buyer, "sale-1").await;

        let resp = app.post("/checkout", Some(&buyer), &shown, true).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let body = json(resp).await;
        assert_eq!(body["error"], "on_sale", "{kind}: {body}");
        let said = body["message"].as_str().unwrap();
        assert!(
            said.contains("item 6") && said.contains("/flash"),
            "{kind}: {said}"
        );
        untouched(&app, &buyer, 5, stock, &cart).await;
        let sale_stock = app.db.inventory_row(item(6)).await.unwrap().unwrap().stock;
        assert_eq!(sale_stock, 3, "{kind}: the sale's units all there");
        // Adding it to a cart is refused too, once the sale pages show the sale.
        let watcher = app.state.take_sale_watcher().unwrap();
        watcher.step().await.unwrap();
        let resp = app
            .post("/cart", Some(&buyer), "item=6&count=1", true)
            .await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        assert_eq!(json(resp).await["error"], "on_sale", "{kind}");
        // The item page's form: a page that says it in words, where the item
        // is sold, and links back to the cart; not to remove from the cart an
        // item that is not in it.
        let resp = app
            .post("/cart", Some(&buyer), "item=6&count=1&add=1", false)
            .await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let page = text(resp).await;
        assert!(page.contains("<h1>That could not be done</h1>"), "{page}");
        assert!(
            page.contains("/flash") && !page.contains("remove it"),
            "{page}"
        );
        assert!(
            page.contains(r#"<a href="/cart">Back to your cart</a>"#),
            "{page}"
        );
        untouched(&app, &buyer, 5, stock, &cart).await;

        // A coming sale's units are the sale's too.
        let now = shop_db::unix_now();
        let coming = shop_db::inventory::Sale {
            stock: 3,
            price_cents: 100,
            start: now + 600,
            end: now + 4_200,
        };
        assert!(
            app.db
                .set_sale(item(6), coming, now)
                .await
                .unwrap()
                .is_set()
        );
        let resp = app.post("/checkout", Some(&buyer), &shown, true).await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}: a coming sale");
        assert_eq!(json(resp).await["error"], "on_sale", "{kind}");
        // The sale over (its window moved to the past), the cart is ordered.
        let over = shop_db::inventory::Sale {
            stock: 3,
            price_cents: 100,
            start: now - 120,
            end: now - 60,
        };
        assert!(app.db.set_sale(item(6), over, now).await.unwrap().is_set());
        let resp = app.post("/checkout", Some(&buyer), &shown, true).await;
        let placed = json(resp).await;
        assert_eq!(placed["outcome"], "placed", "{kind}: {placed}");
        // From the item's 10: the 7 kept back during the sale are its again.
        let left = app.db.inventory_row(item(6)).await.unwrap().unwrap().stock;
        assert_eq!(left, 7, "{kind}");
    }
}

/// An order's page lists what it bought, line by line, at the prices it was
/// charged (not today's), as a page and as JSON; the account page links it.
/// Another user's order, or no order, is 404 and says nothing of it; a guest is
/// sent to log in.
#[tokio::test]
async fn an_order_shows_its_lines_at_the_prices_charged_to_its_buyer_alone() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let buyer = app.logged_in("paula").await;
        app.post("/cart", Some(&buyer), "item=5&count=2", false)
            .await;
        app.post("/cart", Some(&buyer), "item=7&count=1", false)
            .await;
        let (five, seven) = (
            app.db.item(item(5)).await.unwrap().unwrap(),
            app.db.item(item(7)).await.unwrap().unwrap(),
        );
        let shown = app.checkout_form(&buyer, "lines-1").await;
        let placed = json(app.post("/checkout", Some(&buyer), &shown, true).await).await;
        let id = placed["order_id"].as_i64().unwrap();
        // Today's price and title are not what the order bought.
        let edit = ItemEdit::new(
            Some("Renamed since"),
            None,
            Some(five.price_cents + 100),
            None,
        )
        .unwrap();
        app.state
            .catalogue()
            .update(item(5), &edit, None)
            .await
            .unwrap();

        let account = text(app.get("/account", Some(&buyer)).await).await;
        assert!(
            account.contains(&format!("href=\"/account/orders/{id}\"")),
            "{kind}: {account}"
        );
        let resp = app
            .get(&format!("/account/orders/{id}"), Some(&buyer))
            .await;
        assert_eq!(resp.status(), StatusCode::OK, "{kind}");
        assert_eq!(resp.headers()["cache-control"], "private, no-store");
        let page = text(resp).await;
        let total = 2 * five.price_cents + seven.price_cents;
        for said in [
            format!("Order #{id}"),
            format!(
                "{}</a></td><td>2</td><td>{}</td><td>{}</td>",
                five.title,
                money(five.price_cents),
                money(2 * five.price_cents)
            ),
            format!(
                "{}</a></td><td>1</td><td>{}</td>",
                seven.title,
                money(seven.price_cents)
            ),
            format!("<td id=\"order-total\">{}</td>", money(total)),
        ] {
            assert!(page.contains(&said), "{kind}: {said} in {page}");
        }
        assert!(!page.contains("Renamed since"), "{kind}: the title bought");

        let resp = app
            .send(
                axum::http::Request::get(format!("/account/orders/{id}"))
                    .header("cookie", &buyer)
                    .header("accept", "application/json")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await;
        let body = json(resp).await;
        assert_eq!(body["id"], id, "{kind}");
        assert_eq!(body["total_cents"], total, "{kind}");
        assert_eq!(body["units"], 3, "{kind}");
        assert_eq!(
            body["lines"],
            serde_json::json!([
                {"item": 5, "title": five.title, "quantity": 2, "price_cents": five.price_cents},
                {"item": 7, "title": seven.title, "quantity": 1, "price_cents": seven.price_cents},
            ]),
            "{kind}"
        );

        let other = app.logged_in("oscar").await;
        for uri in [
            format!("/account/orders/{id}"),
            format!("/account/orders/{}", id + 1),
            "/account/orders/abc".to_owned(),
            format!("/account/orders/0{id}"),
            "/account/orders/-1".to_owned(),
        ] {
            let resp = app.get(&uri, Some(&other)).await;
            assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{kind}: {uri}");
            let page = text(resp).await;
            assert!(!page.contains(&five.title), "{kind}: {uri}: {page}");
        }
        let guest = app.get(&format!("/account/orders/{id}"), None).await;
        assert_eq!(guest.status(), StatusCode::SEE_OTHER, "{kind}");
    }
}

/// One key used for a cart's checkout and a flash buy (an API client's) names
/// two orders, one of each: the buy is bought (not a 503 holding the unit), and
/// the checkout places the cart (not "placed before" with the flash order).
#[tokio::test]
async fn a_key_used_for_a_checkout_and_a_flash_buy_places_each() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        app.start_sale(6, 3, 100).await;
        let buy = |cookie: &str, key: &str| {
            axum::http::Request::post("/api/flash/6/buy")
                .header("cookie", cookie)
                .header("idempotency-key", key)
                .body(axum::body::Body::empty())
                .unwrap()
        };

        let bob = app.logged_in("bea").await;
        app.post("/cart", Some(&bob), "item=5&count=1", false).await;
        let version = app.cart_version(&bob).await;
        let form = format!("key=SHARED-1&cart_version={version}");
        let placed = json(app.post("/checkout", Some(&bob), &form, true).await).await;
        assert_eq!(placed["new"], true, "{kind}: {placed}");
        let resp = app.send(buy(&bob, "SHARED-1")).await;
        assert_eq!(resp.status(), StatusCode::OK, "{kind}");
        let bought = json(resp).await;
        assert_eq!(bought["outcome"], "bought", "{kind}: {bought}");
        assert_ne!(bought["order_id"], placed["order_id"], "{kind}");

        let carol = app.logged_in("cleo").await;
        let resp = app.send(buy(&carol, "SHARED-2")).await;
        let bought = json(resp).await;
        assert_eq!(bought["outcome"], "bought", "{kind}: {bought}");
        app.post("/cart", Some(&carol), "item=7&count=2", false)
            .await;
        let version = app.cart_version(&carol).await;
        let form = format!("key=SHARED-2&cart_version={version}");
        let placed = json(app.post("/checkout", Some(&carol), &form, true).await).await;
        assert_eq!(placed["outcome"], "placed", "{kind}: {placed}");
        assert_eq!(placed["new"], true, "{kind}: the cart's own order");
        assert_ne!(placed["order_id"], bought["order_id"], "{kind}");
        assert_eq!(
            app.me(&carol).await["cart"]["lines"],
            serde_json::json!([]),
            "{kind}: the cart was ordered"
        );
    }
}

/// A personal page (never cached: the cart, the account, an order) says who is
/// logged in without waiting for a script; a page cached for everyone offers
/// "Log in" and its script says who.
#[tokio::test]
async fn personal_pages_name_who_is_logged_in_without_a_script() {
    let app = TestApp::start().await;
    let logged_out =
        r#"<div id="who"><a href="/login">Log in</a> <a href="/signup">Sign up</a></div>"#;
    let guest = app.visitor().await;
    let cart = text(app.get("/cart", Some(&guest)).await).await;
    assert!(cart.contains(logged_out), "{cart}");
    let paula = app.logged_in("paula").await;
    app.post("/cart", Some(&paula), "item=5&count=1", false)
        .await;
    let shown = app.checkout_form(&paula, "who-1").await;
    let placed = json(app.post("/checkout", Some(&paula), &shown, true).await).await;
    let order = format!("/account/orders/{}", placed["order_id"]);
    let logged_in = r#"<div id="who"><a href="/account">paula</a> <form method="post" action="/logout" class="inline"><button type="submit">Log out</button></form></div>"#;
    for uri in ["/cart", "/account", order.as_str()] {
        let page = text(app.get(uri, Some(&paula)).await).await;
        assert!(page.contains(logged_in), "{uri}: {page}");
        assert!(!page.contains("Log in</a>"), "{uri}");
    }
    let item = text(app.get("/items/3", Some(&paula)).await).await;
    assert!(item.contains(logged_out), "the shared page");
}
