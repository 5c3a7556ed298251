//! What `shop serve` writes into a retailer's store by itself: nothing made-up
//! (no items, users or sale) unless `--demo` asks, never a sale of an item no
//! longer sold, and never a Redis nobody named.

use shop_cache::domain::ItemId;
use shop_db::inventory::{Sale, SaleSet};
use shop_testapp::TestApp;
use shop_testkit::TestDb;

use crate::e2e::{
    Binary, eventually, log_in, request, seeded, seeded_on, serve_printing, stop, succeed,
};
use crate::shop;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// A shop whose database is a new production database's: no items, no users.
async fn empty_shop(db: TestDb) -> TestApp {
    TestApp::builder()
        .items(0)
        .without_users()
        .start_on(db)
        .await
}

/// Whether any of the shop's Redis keys belongs to a flash sale.
async fn has_sale_keys(shop: &TestApp) -> bool {
    shop.redis
        .all_keys()
        .await
        .iter()
        .any(|key| key.starts_with("sale"))
}

#[tokio::test]
async fn a_plain_serve_on_an_empty_database_adds_no_items_users_or_sale() {
    for db in TestDb::all().await {
        let shop = empty_shop(db).await;
        let kind = shop.kind();
        let (child, addr, printed) = serve_printing(shop.shop(), &[]);
        let said = printed.join("\n");
        assert!(
            said.contains("the catalogue is empty")
                && said.contains("shop items import FILE")
                && said.contains("shop seed"),
            "{kind}: it says how to load a catalogue: {said}"
        );
        let home = request(&addr, "GET", "/", None, None);
        assert_eq!(home.status, 200, "{kind}: {}", home.body);
        assert!(
            home.body.contains("The catalogue is empty"),
            "{kind}: {}",
            home.body
        );
        assert!(stop(child).success());

        assert_eq!(shop.db.item_count().await.unwrap(), 0, "{kind}");
        for name in ["alice", "bob", "carol"] {
            assert_eq!(shop.db.user_named(name).await.unwrap(), None, "{kind}");
        }
        assert!(shop.db.sales(0).await.unwrap().is_empty(), "{kind}");
        assert!(!has_sale_keys(&shop).await, "{kind}");
    }
}

#[tokio::test]
async fn a_restart_after_a_sale_ended_starts_no_sale_and_leaves_the_stock_as_it_was() {
    let shop = seeded(50).await;
    assert!(shop.db.set_stock(item(1), 7).await.unwrap());
    let now = shop_db::unix_now();
    let ended = Sale {
        stock: 3,
        price_cents: 100,
        start: now - 7_200,
        end: now - 3_600,
    };
    assert!(matches!(
        shop.db.set_sale(item(2), ended, now).await.unwrap(),
        SaleSet::Started { .. }
    ));

    let (child, addr, printed) = serve_printing(shop.shop(), &[]);
    assert!(
        !printed.join("\n").contains("sale"),
        "no sale is started: {printed:?}"
    );
    let page = request(&addr, "GET", "/flash", None, None);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("data-item="), "{}", page.body);
    assert!(stop(child).success());

    let row = shop.db.inventory_row(item(1)).await.unwrap().unwrap();
    assert_eq!(row.stock, 7, "item 1's stock as it was");
    assert_eq!(row.sale_start, None, "item 1 was never on sale");
    assert!(shop.db.sales(now).await.unwrap().is_empty());
    assert!(!has_sale_keys(&shop).await);
}

#[tokio::test]
async fn demo_seeds_the_catalogue_adds_the_users_and_starts_the_sale_once() {
    let shop = empty_shop(TestDb::sqlite()).await;
    let demo = ["--demo", "--demo-items", "40"];
    let (child, addr, printed) = serve_printing(shop.shop(), &demo);
    let said = printed.join("\n");
    assert!(said.contains("seeded 40 new items"), "{said}");
    assert!(
        said.contains("demo logins: alice / alice-password"),
        "{said}"
    );
    assert!(
        said.contains("started a demo flash sale of item 1"),
        "{said}"
    );
    assert_eq!(shop.db.item_count().await.unwrap(), 40);
    for name in ["alice", "bob", "carol"] {
        assert!(shop.db.user_named(name).await.unwrap().is_some(), "{name}");
    }
    let sales = shop.db.sales(shop_db::unix_now()).await.unwrap();
    assert_eq!(sales.len(), 1, "{sales:?}");
    assert_eq!((sales[0].0, sales[0].1.stock), (item(1), 100));
    let page = request(&addr, "GET", "/flash", None, None);
    assert!(page.body.contains("Demo sale"), "{}", page.body);
    log_in(&addr, "alice");
    assert!(stop(child).success());

    // Started again: nothing is added twice, the running sale is kept as it is.
    let (child, _, printed) = serve_printing(shop.shop(), &demo);
    let said = printed.join("\n");
    assert!(!said.contains("seeded"), "{said}");
    assert!(said.contains("0 demo users added"), "{said}");
    // The accounts were there: their passwords may have been changed since.
    assert!(!said.contains("alice-password"), "{said}");
    assert!(!said.contains("started a demo flash sale"), "{said}");
    assert!(stop(child).success());
    assert_eq!(shop.db.item_count().await.unwrap(), 40);
    assert_eq!(
        shop.db.sales(shop_db::unix_now()).await.unwrap(),
        sales,
        "the sale as it was"
    );
}

#[tokio::test]
async fn the_demo_sale_never_picks_a_retired_item() {
    let shop = seeded(50).await;
    succeed(shop.shop().args(["items", "remove", "1"]));
    let before = shop.db.inventory_row(item(1)).await.unwrap();

    let (child, addr) = shop.serve(&["--demo-sale"]);
    let page = request(&addr, "GET", "/flash", None, None);
    assert!(page.body.contains("data-item=\"2\""), "{}", page.body);
    assert!(page.body.contains("Demo sale"), "{}", page.body);
    assert!(!page.body.contains("data-item=\"1\""), "{}", page.body);
    assert!(stop(child).success());

    let sales = shop.db.sales(shop_db::unix_now()).await.unwrap();
    assert_eq!(
        sales.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [item(2)]
    );
    assert_eq!(shop.db.inventory_row(item(1)).await.unwrap(), before);
}

#[tokio::test]
async fn a_sale_of_a_retired_item_is_refused_and_changes_nothing() {
    for db in TestDb::all().await {
        let shop = seeded_on(db, 20).await;
        let kind = shop.kind();
        succeed(shop.shop().args(["items", "remove", "3"]));
        let before = shop.db.inventory_row(item(3)).await.unwrap();

        let out = shop
            .shop()
            .args(["sale", "start", "3", "--stock", "5", "--price-cents", "100"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{kind}: {stderr}");
        assert!(
            stderr.contains("item 3 is no longer sold (retired)"),
            "{kind}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{kind}: {stderr}");

        assert_eq!(
            shop.db.inventory_row(item(3)).await.unwrap(),
            before,
            "{kind}"
        );
        assert!(shop.db.sales(0).await.unwrap().is_empty(), "{kind}");
        assert!(!has_sale_keys(&shop).await, "{kind}");
        // An item that does not exist is refused as before.
        let out = shop
            .shop()
            .args([
                "sale",
                "start",
                "99",
                "--stock",
                "5",
                "--price-cents",
                "100",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("there is no item 99"), "{kind}: {stderr}");
    }
}

/// The README's first command and the one after it: `serve --demo` with no Redis
/// named runs its own pair under `data/` (never the one that answers on the default
/// port), and the other commands run in the same directory use that pair.
#[test]
fn without_a_named_redis_serve_runs_its_own_and_the_other_commands_use_it() {
    let cwd = tempfile::tempdir().unwrap();
    let in_cwd = || {
        let mut cmd = shop();
        cmd.current_dir(cwd.path());
        cmd
    };
    let sale_of_2 = [
        "sale",
        "start",
        "2",
        "--stock",
        "20",
        "--price-cents",
        "499",
    ];
    // Before any shop runs here, a command has no Redis to use, and says so.
    let out = in_cwd().args(sale_of_2).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no Redis is named") && stderr.contains("REDIS_URL"),
        "{stderr}"
    );

    let (child, addr, printed) = serve_printing(in_cwd(), &["--demo", "--demo-items", "30"]);
    let said = printed.join("\n");
    assert!(said.contains("started a private redis-server"), "{said}");
    assert!(
        said.contains("started a private cache redis-server"),
        "{said}"
    );
    assert!(
        said.contains("started a demo flash sale of item 1"),
        "{said}"
    );
    assert!(cwd.path().join("data/redis/redis.pid").exists());

    succeed(in_cwd().args(sale_of_2));
    let sale = request(&addr, "GET", "/api/flash/2", None, None);
    assert_eq!(sale.status, 200, "{}", sale.body);
    assert!(sale.body.contains("\"stock\":20"), "{}", sale.body);

    // A change made beside it purges the pages where this shop keeps them.
    eventually(
        "item 3's page is cached",
        || request(&addr, "GET", "/items/3", None, None),
        |page| page.header("X-Cache").as_deref() == Some("HIT"),
    );
    succeed(in_cwd().args(["items", "update", "3", "--title", "Renamed kettle"]));
    eventually(
        "item 3's page shows the change",
        || request(&addr, "GET", "/items/3", None, None),
        |page| page.body.contains("Renamed kettle"),
    );
    assert!(stop(child).success());
}

/// A stop sent while `serve` starts (here, while it seeds a large demo catalogue)
/// ends it at once, stopping the private Redis it started, instead of waiting for
/// the seed to finish.
#[test]
fn a_stop_during_the_start_ends_it_and_its_private_redis() {
    use std::io::BufRead;
    let cwd = tempfile::tempdir().unwrap();
    let mut child = shop()
        .current_dir(cwd.path())
        .args(["serve", "--bind", "127.0.0.1:0", "--demo"])
        .args(["--demo-items", "10000000"])
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let started = lines.next().expect("serve printed nothing").unwrap();
    assert!(
        started.contains("started a private redis-server"),
        "{started}"
    );
    let pid = std::fs::read_to_string(cwd.path().join("data/redis/redis.pid")).unwrap();
    let pid = pid.trim().to_owned();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "serve did not stop during its start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        !rest.iter().any(|l| l.contains("serving at")),
        "it never served: {rest:?}"
    );
    let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .contains("State:\tZ");
    assert!(gone, "the private redis-server {pid} outlived serve");
    // Nor the cache's, whether it had started or was starting.
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("redis-server.*{}", cwd.path().display())])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "a private redis-server outlived serve: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// A shop killed outright (SIGKILL, the out-of-memory killer) leaves its
/// private Redis pair running; the next `serve` in that directory stops them
/// (the state Redis saving first) and starts its own on their files: one pair,
/// the carts kept. A second `serve` beside a running one is refused, and stops
/// nothing of the first's.
#[test]
fn the_next_start_stops_the_private_redis_a_killed_shop_left() {
    let cwd = tempfile::tempdir().unwrap();
    let in_cwd = || {
        let mut cmd = shop();
        cmd.current_dir(cwd.path());
        cmd
    };
    let browser = [("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/126.0")];
    let (mut first, addr, _) = serve_printing(in_cwd(), &["--demo", "--demo-items", "30"]);
    let added = crate::e2e::request_with(
        &addr,
        "POST",
        "/cart",
        None,
        Some("item=3&count=2"),
        &browser,
    );
    assert_eq!(added.status, 303, "{}", added.body);
    let cookie = added.set_cookie("shop_session").unwrap();

    let mut beside = in_cwd()
        .args(["serve", "--bind", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = beside.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = beside.kill();
            let _ = beside.wait();
            panic!("a second serve started beside the first");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut beside.stderr.take().unwrap(), &mut said).unwrap();
    assert!(!status.success(), "{said}");
    assert!(said.contains("another `shop serve`"), "{said}");
    let me = crate::e2e::request_with(&addr, "GET", "/api/me", Some(&cookie), None, &browser);
    assert!(
        me.body.contains("\"count\":2"),
        "the first still serves: {}",
        me.body
    );

    first.kill().unwrap();
    first.wait().unwrap();
    let left = std::fs::read_to_string(cwd.path().join("data/redis/redis.pid")).unwrap();
    let left = left.trim().to_owned();
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .is_ok_and(|status| !status.contains("State:\tZ"))
    };
    assert!(alive(&left), "the killed shop's redis-server runs on");

    let (second, addr, printed) = serve_printing(in_cwd(), &[]);
    let said = printed.join("\n");
    assert!(said.contains("started a private redis-server"), "{said}");
    assert!(!alive(&left), "the one left running was stopped");
    let me = crate::e2e::request_with(&addr, "GET", "/api/me", Some(&cookie), None, &browser);
    assert!(
        me.body.contains("\"count\":2"),
        "the cart kept: {}",
        me.body
    );
    let servers = std::process::Command::new("pgrep")
        .args(["-f", &format!("redis-server.*{}", cwd.path().display())])
        .output()
        .unwrap();
    let servers = String::from_utf8_lossy(&servers.stdout);
    assert_eq!(servers.lines().count(), 2, "one pair: {servers}");
    assert!(stop(second).success());
}

/// `serve` warns at its start of a state Redis that can lose carts and
/// sessions (one that evicts when full, one that keeps nothing on disk), and
/// says nothing of one that keeps them.
#[tokio::test]
async fn serve_warns_of_a_state_redis_that_can_lose_what_it_holds() {
    let shop = seeded(10).await;
    let set = async |settings: &[(&str, &str)]| {
        let mut conn = shop.redis.conn().await;
        for (name, value) in settings {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    let warnings = ["evicts keys when full", "keeps nothing on disk"];
    // Everything it logged, once it has stopped.
    let logged = |log: std::sync::Arc<std::sync::Mutex<Vec<String>>>| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let lines = log.lock().unwrap().join("\n");
            if lines.contains("every connection closed") {
                return lines;
            }
            assert!(std::time::Instant::now() < deadline, "{lines}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };

    set(&[
        ("maxmemory-policy", "allkeys-lru"),
        ("appendonly", "no"),
        ("save", ""),
    ])
    .await;
    let (child, _, _, log) = crate::e2e::serve_logged(shop.shop(), &["--no-workers"]);
    assert!(stop(child).success());
    let said = logged(log);
    for warning in warnings {
        assert!(said.contains(warning), "{warning}: {said}");
    }

    set(&[("maxmemory-policy", "noeviction"), ("save", "300 1")]).await;
    let (child, _, _, log) = crate::e2e::serve_logged(shop.shop(), &["--no-workers"]);
    assert!(stop(child).success());
    let said = logged(log);
    for warning in warnings {
        assert!(!said.contains(warning), "{warning}: {said}");
    }
}

/// The demo accounts on a shop that listens beyond this machine: `serve` warns
/// that anyone who reaches it can log in as them.
#[tokio::test]
async fn demo_users_on_a_public_address_are_warned_of() {
    use std::io::BufRead;
    let shop = empty_shop(TestDb::sqlite()).await;
    let mut child = shop
        .shop()
        .args([
            "serve",
            "--bind",
            "0.0.0.0:0",
            "--no-workers",
            "--demo-users",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its log is read until the warning: one that never comes ends with it,
    // killed after 20 s.
    let pid = child.id().to_string();
    let (read, reading) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let waited = reading.recv_timeout(std::time::Duration::from_secs(20));
        if waited == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
        }
    });
    let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    for line in lines.map_while(Result::ok) {
        let done = line.contains("listens beyond this machine") || line.contains("serving");
        said.push(line);
        if done {
            break;
        }
    }
    // Read: the watchdog ends (before the child is reaped, so its pid is no
    // other process's yet).
    drop(read);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        said.iter()
            .any(|l| l.contains("anyone who reaches it can log in as them")),
        "{said:?}"
    );
}
