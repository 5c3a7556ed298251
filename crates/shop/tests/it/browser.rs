//! The shop as a person sees it: headless Chromium (Debian's `chromium`, driven
//! through `chromedriver`) loads an item page, adds it to the cart and sees the
//! cart count that the page's script fetched from `/api/me`; then loads the
//! flash-sale page, sees the stock pushed to it from Redis, and sees "sold out"
//! within a second of other shoppers buying the rest. The
//! item page also shows the shopper insights its script fetched.
//! A newcomer browses the listings, searches, signs up (the guest cart carried
//! over) and checks out, and an admin opens the operations page and its plots.
//! Screenshots land in `target/browser/` for a human look.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{ClientBuilder, Locator};
use shop_cache::domain::ItemId;
use shop_cache::insights::Insights;
use shop_cache::keys::Keys;
use shop_cache::session::{SessionToken, Sessions, Touch};
use shop_page_cache::{DEFAULT_TTL, PageStore};

use crate::e2e::{Binary, seeded, stop};

const CHROMIUM: &str = "/usr/bin/chromium";

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver, or says loudly why the browser test cannot run (a failure
/// under CI=true, where `scripts/test` has installed it).
fn driver() -> Option<Driver> {
    let missing = ["chromedriver", CHROMIUM].into_iter().find(|bin| {
        Command::new("which")
            .arg(bin)
            .output()
            .map_or(true, |o| !o.status.success())
    });
    if let Some(bin) = missing {
        let message = format!(
            "{bin} is not installed: the browser test cannot run \
             (scripts/test installs `chromium chromium-driver`)"
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and {message}");
        }
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("\n*** SKIPPING: {message}\n").as_bytes(),
        );
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

/// Clicks the item page's "Add to cart" button.
async fn add_to_cart(client: &fantoccini::Client) {
    client
        .find(Locator::Css("#add-to-cart button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

async fn text_of(client: &fantoccini::Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The style of item 1's stock bar on the sale page (its width is the stock left).
async fn stock_bar(client: &fantoccini::Client) -> String {
    client
        .find(Locator::Css(".sale-item[data-item=\"1\"] .stock-bar .left"))
        .await
        .unwrap()
        .attr("style")
        .await
        .unwrap()
        .unwrap_or_default()
}

/// Waits (up to 10 s) until the element's text satisfies `ok`.
async fn wait_text(client: &fantoccini::Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(elem) = client.find(Locator::Css(css)).await
            && let Ok(text) = elem.text().await
            && ok(&text)
        {
            return text;
        }
        if Instant::now() > deadline {
            let last = client.find(Locator::Css(css)).await.ok();
            let text = match last {
                Some(e) => e.text().await.unwrap_or_default(),
                None => "<no element>".to_owned(),
            };
            panic!("{css} never matched; last text: {text:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn screenshot(client: &fantoccini::Client, name: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/browser");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(png) = client.screenshot().await {
        let _ = std::fs::write(dir.join(name), png);
    }
}

/// A headless Chromium session through `driver`, with its own profile directory
/// (kept until the second value is dropped).
async fn chromium(driver: &Driver) -> (fantoccini::Client, tempfile::TempDir) {
    let profile = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1200,900",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }),
    );
    // The console, kept for `console_errors`.
    caps.insert(
        "goog:loggingPrefs".to_owned(),
        serde_json::json!({ "browser": "ALL" }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a chromedriver session");
    (client, profile)
}

/// chromedriver's console log of a session (`POST /session/{id}/se/log`, the
/// entries since the last read; kept by the `goog:loggingPrefs` capability).
#[derive(Debug)]
struct ConsoleLog;

impl fantoccini::wd::WebDriverCompatibleCommand for ConsoleLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _url: &url::Url) -> (axum::http::Method, Option<String>) {
        (
            axum::http::Method::POST,
            Some(r#"{"type":"browser"}"#.to_owned()),
        )
    }
}

/// The browser console's messages about the Content-Security-Policy since the last
/// call: a script, style or connection the policy blocked. None may appear.
async fn csp_violations(client: &fantoccini::Client) -> Vec<String> {
    let log = client.issue_cmd(ConsoleLog).await.expect("the console log");
    log.as_array()
        .expect("a list of log entries")
        .iter()
        .filter_map(|entry| entry["message"].as_str())
        .filter(|message| message.contains("Content Security Policy"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_adds_to_cart_and_watches_the_flash_sale() {
    let Some(driver) = driver() else {
        return;
    };
    let shop = seeded(20).await;
    let url = shop.redis.url();
    let sale = shop
        .shop()
        .args(["sale", "start", "1", "--stock", "7", "--price-cents", "499"])
        // Three days: it ends on another day than today, which the page says.
        .args(["--minutes", "4320"])
        .output()
        .unwrap();
    assert!(sale.status.success());
    // Earlier shoppers: nine viewed item 3; three bought it, each with items 4 and
    // 5 (three orders: the default minimum to recommend them with it), and 30
    // orders of other items say how popular items are (so 4 and 5 are bought with
    // 3 far more often than their popularity predicts). With this browser's own
    // view: 3 of 10 viewers bought it.
    let conn = shop_cache::connect(&url).await.unwrap();
    let sessions = Sessions::new(conn.clone(), Keys::default());
    let insights = Insights::new(conn, Keys::default());
    let shoppers: Vec<SessionToken> = (0..9).map(|_| SessionToken::generate()).collect();
    for shopper in &shoppers {
        sessions
            .touch(shopper, Touch::request().view(ItemId::new(3).unwrap()))
            .await
            .unwrap();
    }
    sessions.flush_views().await.unwrap();
    let id = |n: u64| ItemId::new(n).unwrap();
    for shopper in &shoppers[..3] {
        insights
            .record_order(shopper, &[id(3), id(4), id(5)])
            .await
            .unwrap();
    }
    for n in 0..30 {
        insights
            .record_order(&SessionToken::generate(), &[id(6 + n % 10)])
            .await
            .unwrap();
    }
    // Ten viewers are enough to say the share here (the default minimum is 50).
    let (server, addr) = shop.serve(&["--insights-min-viewers", "10"]);
    let (client, _profile) = chromium(&driver).await;

    let base = format!("http://{addr}");
    // The home page first: the browser's session starts when its cookie comes back
    // (a visitor who never returns one counts in the ranking, not among viewers).
    client.goto(&format!("{base}/")).await.unwrap();
    client.goto(&format!("{base}/items/3")).await.unwrap();
    // The shop writes views every 100 ms: once this browser's view is counted, the
    // page shown again says so.
    let item = ItemId::new(3).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while insights.get(item).await.unwrap().viewers < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "the view was never counted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The insights are cached for the page TTL, and the first visit cached them
    // with 9 viewers: purged (as a change to the item would), then the server is
    // asked until it answers from the new figures (its in-process tier drops the
    // old answer when the purge's event arrives).
    let pages = PageStore::new(
        shop_cache::connect(&url).await.unwrap(),
        &Keys::default(),
        DEFAULT_TTL,
    );
    pages
        .purge(&[shop_app::page_tags::item(item)])
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !crate::e2e::request(&addr, "GET", "/api/items/3/insights", None, None)
        .body
        .contains("\"viewers\":10")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the purged insights were never rendered again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    client.refresh().await.unwrap();
    let title = text_of(&client, "h1").await;
    assert!(!title.is_empty());
    wait_text(&client, "#cart-count", |t| t == "0").await;
    // The insights, filled in by the page's script.
    let pct = wait_text(&client, "#insights .viewed-bought", |t| t.contains('%')).await;
    assert_eq!(
        pct,
        "30% of 10 shoppers who viewed this item in the last two weeks bought it."
    );
    let also = wait_text(&client, "#insights .also-bought", |t| !t.is_empty()).await;
    // Items 4 and 5 were in the same orders: equal scores, so the lower id first.
    let first = also.lines().next().unwrap_or_default().to_owned();
    assert!(first.ends_with(" 4"), "item 4 first: {also}");
    screenshot(&client, "item.png").await;
    add_to_cart(&client).await;
    // The form posts and lands on the cart page; the header count comes from /api/me.
    wait_text(&client, "#cart-count", |t| t == "1").await;
    assert!(
        client
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/cart")
    );
    let cart = text_of(&client, "table.cart").await;
    assert!(cart.contains(&title), "{cart}");
    screenshot(&client, "cart.png").await;

    // Item 4 in the cart too: item 3's page no longer recommends it (the page's
    // script leaves out what /api/me says is in the cart), only item 5.
    client.goto(&format!("{base}/items/4")).await.unwrap();
    add_to_cart(&client).await;
    wait_text(&client, "#cart-count", |t| t == "2").await;
    client.goto(&format!("{base}/items/3")).await.unwrap();
    let also = wait_text(&client, "#insights .also-bought", |t| !t.is_empty()).await;
    let shown: Vec<&str> = also.lines().collect();
    assert!(
        shown.len() == 1 && shown[0].ends_with(" 5"),
        "item 5 alone: {also}"
    );
    // "Add to cart" again on a page whose item is in the cart: one more of it.
    add_to_cart(&client).await;
    wait_text(&client, "#cart-count", |t| t == "3").await;

    client.goto(&format!("{base}/flash")).await.unwrap();
    let stock = wait_text(&client, ".sale-item[data-item=\"1\"] .stock", |t| {
        t.contains("left")
    })
    .await;
    assert_eq!(stock, "7 left");
    let price = text_of(&client, ".sale-item[data-item=\"1\"] .price").await;
    assert!(price.starts_with("$4.99"), "{price}");
    // A countdown to the end, and the stock as a bar: all 7 units left.
    let countdown = wait_text(&client, ".sale-item[data-item=\"1\"] .countdown", |t| {
        t.starts_with("ends in ")
    })
    .await;
    assert!(countdown.contains(':'), "{countdown}");
    // Its end is three days off: said with its date, not a time that reads as today's.
    let window = text_of(&client, ".sale-item[data-item=\"1\"] .window").await;
    assert!(
        window.starts_with("ends ")
            && window
                .as_bytes()
                .windows(4)
                .any(|four| four.iter().all(u8::is_ascii_digit)),
        "{window}"
    );
    assert_eq!(stock_bar(&client).await, "width: 100%;");
    screenshot(&client, "flash.png").await;
    // A guest's buy: a link to log in and come back, nothing bought.
    click(&client, ".sale-item[data-item=\"1\"] .buy").await;
    wait_text(&client, ".sale-item[data-item=\"1\"] .result a", |t| {
        t == "Log in to buy"
    })
    .await;
    let login = client
        .find(Locator::Css(".sale-item[data-item=\"1\"] .result a"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap();
    assert_eq!(login.as_deref(), Some("/login?next=/flash"));

    // Seven other shoppers buy the rest; the open page says "sold out" within a
    // second of the last purchase, pushed to it (no reload, no poll).
    let db = shop_db::Db::connect(shop.test_db.url()).await.unwrap();
    let names: Vec<String> = (0..7).map(|i| format!("rush{i}")).collect();
    let buyers = db
        .create_users_sharing_password(&names, "rush-password")
        .await
        .unwrap();
    let mut cookies = Vec::new();
    for user in buyers {
        let token = sessions
            .login(&SessionToken::generate(), user, None)
            .await
            .unwrap();
        cookies.push(format!("shop_session={}", token.expose()));
    }
    let buy_addr = addr.clone();
    let last_bought = tokio::task::spawn_blocking(move || {
        for (i, cookie) in cookies.iter().enumerate() {
            let key = format!("rush-{i}");
            let bought = crate::e2e::request_with(
                &buy_addr,
                "POST",
                "/api/flash/1/buy",
                Some(cookie),
                None,
                &[("Idempotency-Key", &key), ("Accept", "application/json")],
            );
            assert_eq!(bought.status, 200, "{}", bought.body);
        }
        Instant::now()
    })
    .await
    .unwrap();
    let sold_out = loop {
        let shown = text_of(&client, ".sale-item[data-item=\"1\"] .stock").await;
        if shown == "sold out" {
            break last_bought.elapsed();
        }
        assert!(
            last_bought.elapsed() < Duration::from_secs(3),
            "still showing {shown:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        sold_out < Duration::from_secs(1),
        "sold out reached the page after {sold_out:?}"
    );
    let disabled = client
        .find(Locator::Css(".sale-item[data-item=\"1\"] .buy"))
        .await
        .unwrap()
        .attr("disabled")
        .await
        .unwrap();
    assert!(disabled.is_some(), "the buy button is off when sold out");
    assert_eq!(stock_bar(&client).await, "width: 0%;");
    screenshot(&client, "flash-sold-out.png").await;

    // An item whose sale runs: its page links the sale page instead of "Add to
    // cart" (which the cart would refuse), and its script offers "Add to cart"
    // again the moment the sale ends (a page cached during the sale may be
    // served for a while after). Item 2 was never viewed: its page is rendered.
    let now = shop_db::unix_now();
    let ending = shop_db::inventory::Sale {
        stock: 3,
        price_cents: 100,
        start: now - 60,
        end: now + 8,
    };
    assert!(db.set_sale(id(2), ending, now).await.unwrap().is_set());
    client.goto(&format!("{base}/items/2")).await.unwrap();
    let notice = text_of(&client, "#sale-notice").await;
    assert!(
        notice.starts_with("On flash sale at $1.00 until"),
        "{notice}"
    );
    let shown = |css: &'static str| {
        let client = client.clone();
        async move {
            let found = client.find(Locator::Css(css)).await.unwrap();
            found.is_displayed().await.unwrap()
        }
    };
    assert!(
        !shown("#add-to-cart").await,
        "no Add to cart during the sale"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !shown("#add-to-cart").await || shown("#sale-notice").await {
        assert!(
            Instant::now() < deadline,
            "Add to cart not back after the sale"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // An open redirect the drills found: `next=/<TAB>/evil.host/x` was sent back as
    // `Location: /\t/evil.host/x`, which Chromium (dropping the tab) followed to
    // another origin. Now the login is refused before anything happens, and the
    // browser stays on the shop.
    client.goto(&format!("{base}/login")).await.unwrap();
    client
        .execute(
            "document.querySelector('form[action=\"/login\"] input[name=next]').value = \
             '/\\t/evil.host/x';",
            vec![],
        )
        .await
        .unwrap();
    let form = client
        .find(Locator::Css("form[action=\"/login\"]"))
        .await
        .unwrap();
    form.find(Locator::Css("input[name=name]"))
        .await
        .unwrap()
        .send_keys("alice")
        .await
        .unwrap();
    form.find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("alice-password")
        .await
        .unwrap();
    form.find(Locator::Css("button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "body", |t| t.contains("next must be a path")).await;
    let landed = client.current_url().await.unwrap();
    assert_eq!(landed.host_str(), Some("127.0.0.1"), "{landed}");
    assert_eq!(landed.path(), "/login");
    screenshot(&client, "open-redirect-refused.png").await;

    // Every page above worked under the Content-Security-Policy, and the console
    // says nothing was blocked.
    let violations = csp_violations(&client).await;
    assert!(
        violations.is_empty(),
        "blocked by the policy: {violations:?}"
    );
    client.close().await.unwrap();
    assert!(stop(server).success());
    drop(driver);
}

/// Types `text` into the field `css` of the page.
async fn fill(client: &fantoccini::Client, css: &str, text: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
}

async fn click(client: &fantoccini::Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap();
}

/// Logs in through the login form, as a person does, and waits to land on `next`.
async fn log_in_as(
    client: &fantoccini::Client,
    base: &str,
    name: &str,
    password: &str,
    next: &str,
) {
    client
        .goto(&format!("{base}/login?next={next}"))
        .await
        .unwrap();
    fill(client, "form[action=\"/login\"] input[name=name]", name).await;
    fill(
        client,
        "form[action=\"/login\"] input[name=password]",
        password,
    )
    .await;
    click(client, "form[action=\"/login\"] button").await;
    wait_path(client, next).await;
}

/// Waits for the browser to land on a page whose path (and `?query`, if any)
/// starts with `prefix`; that path and query.
async fn wait_path(client: &fantoccini::Client, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let url = client.current_url().await.unwrap();
        let here = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        if here.starts_with(prefix) {
            return here;
        }
        assert!(Instant::now() < deadline, "still on {here}, not {prefix}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_browses_searches_signs_up_and_checks_out() {
    let Some(driver) = driver() else {
        return;
    };
    let shop = seeded(100).await;
    let (server, addr) = shop.serve(&[]);
    let (client, _profile) = chromium(&driver).await;
    let base = format!("http://{addr}");

    // Home: the departments and "all items", and, though nothing has been
    // viewed yet, product cards with their pictures, each drawn and shown.
    client.goto(&base).await.unwrap();
    let cards = client
        .find_all(Locator::Css("#featured li.card"))
        .await
        .unwrap();
    assert!(cards.len() >= 8, "{} product cards", cards.len());
    for card in &cards[..4] {
        let picture = card.find(Locator::Css("img")).await.unwrap();
        let shown: bool = client
            .execute(
                "return arguments[0].complete && arguments[0].naturalWidth > 0",
                vec![serde_json::to_value(&picture).unwrap()],
            )
            .await
            .unwrap()
            .as_bool()
            .unwrap();
        assert!(shown, "a card's picture is drawn");
        assert!(!card.text().await.unwrap().trim().is_empty());
    }
    screenshot(&client, "home.png").await;
    click(&client, "main nav.categories a[href=\"/items\"]").await;
    wait_path(&client, "/items").await;
    wait_text(&client, "h1", |t| t == "All items").await;
    let first_page = text_of(&client, "ul.items").await;
    click(&client, "a[rel=next]").await;
    wait_path(&client, "/items?after=24").await;
    assert_ne!(text_of(&client, "ul.items").await, first_page);
    screenshot(&client, "listing.png").await;

    // A department, then an item in it.
    click(&client, "main nav.categories a[href^=\"/c/\"]").await;
    let here = wait_path(&client, "/c/").await;
    let department = here.trim_start_matches("/c/").to_owned();
    assert!(
        text_of(&client, "h1")
            .await
            .eq_ignore_ascii_case(&department),
        "{department}"
    );
    click(&client, "ul.items li a").await;
    wait_path(&client, "/items/").await;
    let title = text_of(&client, "h1").await;
    click(&client, "#add-to-cart button").await;
    wait_text(&client, "#cart-count", |t| t == "1").await;

    // Search from the header box for the item's noun: the item is among the results.
    let noun = title.split(' ').nth(1).unwrap().to_owned();
    fill(
        &client,
        "header form.search input[name=q]",
        &format!("{noun}\n"),
    )
    .await;
    wait_path(&client, "/search").await;
    let results = wait_text(&client, "main", |t| t.contains("Page 1")).await;
    assert!(results.contains(&title), "{title} in {results}");
    screenshot(&client, "search.png").await;

    // Sign up: a refused name first, then a good one; the cart comes along.
    client.goto(&format!("{base}/signup")).await.unwrap();
    fill(
        &client,
        "form[action=\"/signup\"] input[name=name]",
        "newcomer",
    )
    .await;
    fill(
        &client,
        "form[action=\"/signup\"] input[name=password]",
        "short",
    )
    .await;
    // The browser's own checks would stop a short password; send it anyway.
    client
        .execute(
            "document.querySelector('form[action=\"/signup\"]').noValidate = true;",
            vec![],
        )
        .await
        .unwrap();
    click(&client, "form[action=\"/signup\"] button").await;
    wait_text(&client, "p.error", |t| t.contains("at least 10")).await;
    fill(
        &client,
        "form[action=\"/signup\"] input[name=password]",
        "newcomer-password",
    )
    .await;
    click(&client, "form[action=\"/signup\"] button").await;
    wait_text(&client, "#who", |t| t.contains("newcomer")).await;
    wait_text(&client, "#cart-count", |t| t == "1").await;
    screenshot(&client, "signed-up.png").await;

    // Check out: one order on the account page.
    client.goto(&format!("{base}/cart")).await.unwrap();
    assert!(text_of(&client, "table.cart").await.contains(&title));
    click(&client, "#checkout").await;
    wait_path(&client, "/account").await;
    let account = text_of(&client, "table.orders").await;
    assert!(account.contains("cart"), "{account}");
    wait_text(&client, "#cart-count", |t| t == "0").await;
    screenshot(&client, "checked-out.png").await;

    // An admin's operations page: the figures, and plots drawn from the traffic
    // this browser just made (one point a second).
    let mut add = shop.shop();
    add.args(["users", "add", "boss", "--admin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let mut child = add.spawn().unwrap();
    {
        use std::io::Write as _;
        writeln!(child.stdin.take().unwrap(), "boss-password-1").unwrap();
    }
    assert!(child.wait().unwrap().success());
    log_in_as(&client, &base, "boss", "boss-password-1", "/ops").await;
    assert_eq!(text_of(&client, "h1").await, "Operations");
    let sessions: u64 = text_of(&client, "#sessions").await.parse().unwrap();
    assert!(sessions >= 1);
    for plot in ["#rate-plot", "#p99-plot", "#cache-plot"] {
        let points = client
            .find(Locator::Css(&format!("{plot} polyline")))
            .await
            .unwrap()
            .attr("points")
            .await
            .unwrap()
            .unwrap_or_default();
        let points = points.split_whitespace().count();
        assert!(points >= 2, "{plot} has {points} points");
    }
    screenshot(&client, "ops.png").await;

    // Every page above worked under the Content-Security-Policy, and the console
    // says nothing was blocked.
    let violations = csp_violations(&client).await;
    assert!(
        violations.is_empty(),
        "blocked by the policy: {violations:?}"
    );
    client.close().await.unwrap();
    assert!(stop(server).success());
    drop(driver);
}

/// `name` logged in over plain HTTP from an Android phone's browser (JSON).
fn log_in_from_a_phone(addr: &str, name: &str, password: &str) -> crate::e2e::Reply {
    crate::e2e::request_with(
        addr,
        "POST",
        "/login",
        None,
        Some(&format!("name={name}&password={password}")),
        &[
            ("Accept", "application/json"),
            (
                "User-Agent",
                "Mozilla/5.0 (Linux; Android 14) Chrome/126.0 Mobile",
            ),
        ],
    )
}

/// A shopper whose phone is lost logs it out from the account page: the page
/// lists both devices, marks this one, and the phone's next request is logged out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shopper_logs_a_lost_phone_out_from_the_devices_page() {
    let Some(driver) = driver() else {
        return;
    };
    let shop = seeded(20).await;
    shop.db
        .create_user("lia", "lia-password-1")
        .await
        .unwrap()
        .unwrap();
    let (server, addr) = shop.serve(&[]);
    // The phone: logged in over plain HTTP, its own cookie.
    let login = log_in_from_a_phone(&addr, "lia", "lia-password-1");
    assert_eq!(login.status, 200, "{}", login.body);
    let phone = login.set_cookie("shop_session").unwrap();
    let mine = crate::e2e::request(&addr, "GET", "/api/me/sessions", Some(&phone), None);
    let listed: serde_json::Value = serde_json::from_str(&mine.body).unwrap();
    let phone_id = listed["sessions"][0]["id"].as_str().unwrap().to_owned();

    let (client, _profile) = chromium(&driver).await;
    let base = format!("http://{addr}");
    client.goto(&base).await.unwrap();
    log_in_as(&client, &base, "lia", "lia-password-1", "/account").await;
    let table = wait_text(&client, "table.sessions", |t| t.contains("Android")).await;
    assert!(table.contains("Chrome on Android"), "{table}");
    assert!(table.contains("(this device)"), "{table}");
    assert_eq!(
        client
            .find_all(Locator::Css("tr.session"))
            .await
            .unwrap()
            .len(),
        2
    );
    screenshot(&client, "devices.png").await;
    click(
        &client,
        &format!("form[action=\"/api/me/sessions/{phone_id}/end\"] button"),
    )
    .await;
    wait_text(&client, "table.sessions", |t| !t.contains("Android")).await;
    wait_path(&client, "/account").await;
    let me = crate::e2e::request(&addr, "GET", "/api/me", Some(&phone), None);
    assert!(me.body.contains("\"user\":null"), "{}", me.body);
    let violations = csp_violations(&client).await;
    assert!(
        violations.is_empty(),
        "blocked by the policy: {violations:?}"
    );
    client.close().await.unwrap();
    assert!(stop(server).success());
    drop(driver);
}

/// A visitor who lands on an item page (from a search engine: no cookie yet)
/// finds that item among the recently viewed on the next page, and its view
/// counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_visitors_landing_page_is_among_the_recently_viewed_on_the_next() {
    let Some(driver) = driver() else {
        return;
    };
    let shop = seeded(20).await;
    let (server, addr) = shop.serve(&[]);
    let (client, _profile) = chromium(&driver).await;
    let base = format!("http://{addr}");

    client.goto(&format!("{base}/items/7")).await.unwrap();
    let landed = text_of(&client, "h1").await;
    wait_text(&client, "#cart-count", |t| !t.is_empty()).await;
    counted(&shop, 7, 1.0).await;
    // The script names the page once its session's cookie came (a person
    // reads the page meanwhile): wait for that before the next page.
    let session = client.get_named_cookie("shop_session").await.unwrap();
    let cookie = format!("shop_session={}", session.value());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let me = crate::e2e::request(&addr, "GET", "/api/me", Some(&cookie), None);
        if me.body.contains("\"id\":7") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never in the history: {}",
            me.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.goto(&format!("{base}/items/8")).await.unwrap();
    wait_text(&client, "#recent", |t| t.contains(&landed)).await;
    assert_eq!(
        views_of(&shop, 7).await,
        1.0,
        "the landing page counted once"
    );
    client.close().await.unwrap();
    assert!(stop(server).success());
    drop(driver);
}

/// Item `item`'s count in the ranking (`viewed:` counts down).
async fn views_of(shop: &shop_testapp::TestApp, item: u64) -> f64 {
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg("viewed:")
        .arg(item)
        .query_async(&mut shop.redis.conn().await)
        .await
        .unwrap();
    -score.unwrap_or(0.0)
}

/// Waits until item `item` has been counted `n` times, then checks it stays so
/// for ten flush intervals (a second count would arrive within them).
async fn counted(shop: &shop_testapp::TestApp, item: u64, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while views_of(shop, item).await < n {
        assert!(
            Instant::now() < deadline,
            "view {n} of item {item} never counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let settled = Instant::now() + Duration::from_secs(1);
    while Instant::now() < settled {
        assert_eq!(views_of(shop, item).await, n, "item {item} counted twice");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_the_edge_served_is_counted_once_by_its_script() {
    let Some(driver) = driver() else {
        return;
    };
    let shop = seeded(20).await;
    let port = shop_testkit::TestVarnish::free_port();
    let purge_url = format!("http://127.0.0.1:{port}/");
    let (server, addr) = shop.serve(&["--edge-purge-url", &purge_url]);
    let varnish = shop_testkit::TestVarnish::start_on(port, &[&addr]);
    let (client, _profile) = chromium(&driver).await;
    let edge = format!("http://{}", varnish.addr());

    // The first page gives the browser its cookie through its /api/me call.
    client.goto(&format!("{edge}/items/4")).await.unwrap();
    wait_text(&client, "#cart-count", |t| !t.is_empty()).await;
    counted(&shop, 4, 1.0).await;
    // Again: the edge's copy this time, counted by the page's script with the
    // session, so it is in the history the next page shows.
    client.goto(&format!("{edge}/items/4")).await.unwrap();
    counted(&shop, 4, 2.0).await;
    client.goto(&format!("{edge}/items/5")).await.unwrap();
    counted(&shop, 5, 1.0).await;
    wait_text(&client, "#recent", |t| t.contains("4")).await;
    // The same browser at the shop itself (cookies do not depend on the port):
    // the page's own request counts, its script names nothing.
    client
        .goto(&format!("http://{addr}/items/4"))
        .await
        .unwrap();
    wait_text(&client, "#cart-count", |t| !t.is_empty()).await;
    counted(&shop, 4, 3.0).await;
    screenshot(&client, "edge-item.png").await;

    client.close().await.unwrap();
    drop(varnish);
    assert!(stop(server).success());
}

/// While the session store is stalled a page says neither who is logged in nor
/// a cart count (the page comes without one, the same for everyone; `/api/me`
/// answers `degraded`): not "Cart 0" to a shopper whose cart holds an item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_session_store_shows_no_cart_count() {
    let Some(driver) = driver() else {
        return;
    };
    let shop = seeded(20).await;
    let (server, addr) = shop.serve(&[]);
    let (client, _profile) = chromium(&driver).await;
    let base = format!("http://{addr}");
    client.goto(&format!("{base}/items/3")).await.unwrap();
    add_to_cart(&client).await;
    wait_text(&client, "#cart-count", |t| t == "1").await;

    shop.redis.pause();
    client.goto(&format!("{base}/items/4")).await.unwrap();
    let who = client.find(Locator::Css("#who")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while who.is_displayed().await.unwrap() {
        assert!(Instant::now() < deadline, "the login stayed shown");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let count = client.find(Locator::Css("#cart-count")).await.unwrap();
    assert!(!count.is_displayed().await.unwrap(), "a count was shown");
    assert_eq!(count.text().await.unwrap(), "");
    shop.redis.resume();

    // Once the shop finds Redis again (its breaker's next probe), the count is
    // back: the page asks once a load, so load it until then.
    let session = client.get_named_cookie("shop_session").await.unwrap();
    let cookie = format!("shop_session={}", session.value());
    let deadline = Instant::now() + Duration::from_secs(10);
    while crate::e2e::request(&addr, "GET", "/api/me", Some(&cookie), None)
        .body
        .contains("\"degraded\":true")
    {
        assert!(Instant::now() < deadline, "still degraded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.refresh().await.unwrap();
    wait_text(&client, "#cart-count", |t| t == "1").await;
    client.close().await.unwrap();
    assert!(stop(server).success());
    drop(driver);
}

/// The cart and the account's list of devices fit a 375 px phone: nothing runs
/// off the side (their tables stack each row's cells).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cart_and_the_account_fit_a_phone() {
    let Some(driver) = driver() else {
        return;
    };
    let shop = seeded(20).await;
    shop.db
        .create_user("pia", "pia-password-1")
        .await
        .unwrap()
        .unwrap();
    let (server, addr) = shop.serve(&[]);
    // Another device logged in: the devices table has its "Log out" button.
    let other = log_in_from_a_phone(&addr, "pia", "pia-password-1");
    assert_eq!(other.status, 200, "{}", other.body);
    let (client, _profile) = chromium(&driver).await;
    let base = format!("http://{addr}");
    client.goto(&base).await.unwrap();
    log_in_as(&client, &base, "pia", "pia-password-1", "/account").await;
    for item in [3, 4] {
        client.goto(&format!("{base}/items/{item}")).await.unwrap();
        add_to_cart(&client).await;
        wait_path(&client, "/cart").await;
    }
    client.set_window_size(375, 800).await.unwrap();
    let width = client
        .execute("return window.innerWidth", vec![])
        .await
        .unwrap()
        .as_i64()
        .unwrap();
    assert!(width <= 400, "the window is {width} px wide");
    for page in ["/cart", "/account"] {
        client.goto(&format!("{base}{page}")).await.unwrap();
        let widths = client
            .execute(
                "const e = document.documentElement; return [e.scrollWidth, e.clientWidth];",
                vec![],
            )
            .await
            .unwrap();
        let (wide, shown) = (widths[0].as_i64().unwrap(), widths[1].as_i64().unwrap());
        screenshot(&client, &format!("{}-375.png", &page[1..])).await;
        assert!(wide <= shown, "{page} is {wide} px wide in {shown}");
    }
    client.close().await.unwrap();
    assert!(stop(server).success());
    drop(driver);
}
