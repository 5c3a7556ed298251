//! `shop items` as an operator runs it: add, update, remove and import, each seen
//! by a running `shop serve` whose pages were cached (in Redis at once, in its own
//! tier within milliseconds, so the test polls); bad input is a clear
//! error that changes nothing. On SQLite and PostgreSQL (and the cluster layout in
//! `cluster.rs`).

use std::io::Write;
use std::process::Output;

use shop_cache::domain::ItemId;
use shop_testkit::TestDb;

use crate::e2e::{Binary, eventually, request, seeded_on, stop, succeed};

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_is_served_by_a_running_shop_within_moments() {
    for db in TestDb::all().await {
        let app = seeded_on(db, 40).await;
        let kind = app.kind();
        let (server, addr) = app.serve(&[]);
        // Item 7 ranks, so its page is cached; so are the listings.
        let _: () = redis::AsyncCommands::zadd(&mut app.redis.conn().await, "viewed:", 7, -50)
            .await
            .unwrap();
        for uri in ["/items/7", "/items/7", "/items", "/items"] {
            assert_eq!(
                request(&addr, "GET", uri, None, None).status,
                200,
                "{kind} {uri}"
            );
        }
        assert_eq!(
            request(&addr, "GET", "/items/7", None, None).header("x-cache"),
            Some("HIT".into()),
            "{kind}"
        );

        let out = succeed(app.shop().args([
            "items",
            "update",
            "7",
            "--price-cents",
            "4321",
            "--title",
            "Copper kettle",
        ]));
        assert!(
            stdout(&out).contains("item 7 updated"),
            "{kind}: {}",
            stdout(&out)
        );
        // Redis's copies are purged when the command returns; the server's tier
        // drops its own as the purge's event arrives, within milliseconds.
        eventually(
            &format!("{kind}: the changed page"),
            || request(&addr, "GET", "/items/7", None, None),
            |page| page.body.contains("Copper kettle") && page.body.contains("$43.21"),
        );
        eventually(
            &format!("{kind}: the listing too"),
            || request(&addr, "GET", "/items", None, None),
            |listing| listing.body.contains("Copper kettle"),
        );

        let out = succeed(app.shop().args([
            "items",
            "add",
            "--title",
            "Garden gnome",
            "--description",
            "Small.",
            "--price-cents",
            "999",
            "--category",
            "garden",
            "--stock",
            "4",
        ]));
        let id = stdout(&out).trim().to_owned();
        assert_eq!(id, "41", "{kind}: prints the new id");
        assert_eq!(
            request(&addr, "GET", "/items/41", None, None).status,
            200,
            "{kind}"
        );

        succeed(app.shop().args(["items", "remove", "7"]));
        eventually(
            &format!("{kind}: the retired item's page"),
            || request(&addr, "GET", "/items/7", None, None),
            |page| page.status == 410,
        );
        eventually(
            &format!("{kind}: the listing without it"),
            || request(&addr, "GET", "/items", None, None),
            |listing| !listing.body.contains("href=\"/items/7\""),
        );
        let again = succeed(app.shop().args(["items", "remove", "7"]));
        assert!(stdout(&again).contains("already retired"), "{kind}");
        assert!(stop(server).success());
    }
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_changes_nothing() {
    let app = seeded_on(TestDb::sqlite(), 10).await;
    let before = app.db.item(item(3)).await.unwrap().unwrap();
    for (args, says) in [
        (vec!["items", "update", "3", "--price-cents", "-5"], "price"),
        (vec!["items", "update", "3", "--title", "  "], "title"),
        (vec!["items", "update", "3"], "nothing to change"),
        (
            vec!["items", "update", "99", "--price-cents", "5"],
            "no item 99",
        ),
        (vec!["items", "update", "3", "--colour", "red"], "--colour"),
        (vec!["items", "remove", "99"], "no item 99"),
        (
            vec![
                "items",
                "add",
                "--title",
                "X",
                "--price-cents",
                "1",
                "--category",
                "a/b",
            ],
            "department",
        ),
        (
            vec![
                "items",
                "add",
                "--title",
                "X",
                "--price-cents",
                "1",
                "--category",
                "c",
                "--id",
                "3",
            ],
            "already exists",
        ),
        (vec!["items", "remove", "zero"], "item id"),
        // More than any stock command could write off again.
        (
            vec![
                "items",
                "add",
                "--title",
                "X",
                "--price-cents",
                "1",
                "--category",
                "c",
                "--stock",
                "1000000001",
            ],
            "--stock",
        ),
    ] {
        let out = app.shop().args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(app.db.item(item(3)).await.unwrap().unwrap(), before);
    assert_eq!(app.db.item_count().await.unwrap(), 10);
}

#[tokio::test]
async fn an_import_checks_every_line_first_then_writes_only_what_changed() {
    for db in TestDb::all().await {
        let app = seeded_on(db, 10).await;
        let kind = app.kind();
        let one = app.db.item(item(1)).await.unwrap().unwrap();
        let line = |id: u64, title: &str, price: i64| {
            format!(
                r#"{{"id":{id},"title":"{title}","description":"d","price_cents":{price},"category":"kitchen"}}"#
            )
        };
        let file = app.cwd.path().join("feed.jsonl");
        let bad = [
            line(2, "Two", 200),
            line(11, "Eleven", 1100),
            line(12, "", 5),
        ]
        .join("\n");
        std::fs::write(&file, bad).unwrap();
        let out = app
            .shop()
            .args(["items", "import"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{kind}");
        let err = stderr(&out);
        assert!(
            err.contains("line 3") && err.contains("title") && err.contains("nothing was written"),
            "{kind}: {err}"
        );
        assert_eq!(
            app.db.item_count().await.unwrap(),
            10,
            "{kind}: nothing added"
        );
        assert_ne!(
            app.db.item(item(2)).await.unwrap().unwrap().price_cents,
            200,
            "{kind}"
        );

        // Item 2 on sale at its price, which the import then lowers: the sale
        // would charge more than the item costs, and sells nothing; said.
        let regular = app.db.item(item(2)).await.unwrap().unwrap().price_cents;
        assert!(regular > 200, "{kind}: the test lowers it to 200");
        let sale = app
            .shop()
            .args(["sale", "start", "2", "--stock", "5", "--price-cents"])
            .arg(regular.to_string())
            .output()
            .unwrap();
        stdout(&sale);

        // The same as item 1 is, a change to item 2, two new items, by stdin.
        let same = format!(
            r#"{{"id":1,"title":{},"description":{},"price_cents":{},"category":{}}}"#,
            serde_json::to_string(&one.title).unwrap(),
            serde_json::to_string(&one.description).unwrap(),
            one.price_cents,
            serde_json::to_string(&one.category).unwrap()
        );
        let good = [
            same,
            line(2, "Two", 200),
            line(11, "Eleven", 1100),
            line(12, "Twelve", 1200),
        ]
        .join("\n");
        let mut child = app
            .shop()
            .args(["items", "import", "-", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(good.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{kind}: {}", stderr(&out));
        let said = stdout(&out);
        assert!(
            said.contains("2 added, 1 changed, 1 unchanged"),
            "{kind}: {said}"
        );
        let warned = stderr(&out);
        assert!(
            warned.contains(&format!(
                "warning: item 2's flash sale is priced at {regular} cents, above its regular \
                 price of 200 cents"
            )),
            "{kind}: {warned}"
        );
        assert_eq!(
            app.db.item(item(2)).await.unwrap().unwrap().price_cents,
            200,
            "{kind}"
        );
        assert_eq!(app.db.item_count().await.unwrap(), 12, "{kind}");
    }
}

/// A feed still listing an item an admin retired leaves it retired and as it
/// was, and says so; `--sell-retired` sells it again with the line's fields.
#[tokio::test]
async fn an_import_leaves_a_retired_item_retired_unless_told_to_sell_it_again() {
    let app = seeded_on(TestDb::sqlite(), 10).await;
    let before = app.db.item(item(3)).await.unwrap().unwrap();
    succeed(app.shop().args(["items", "remove", "3"]));
    let retired = app.db.item(item(3)).await.unwrap().unwrap();
    assert!(retired.retired);
    let file = app.cwd.path().join("feed.jsonl");
    let cheaper = before.price_cents - 1;
    std::fs::write(
        &file,
        format!(
            r#"{{"id":3,"title":"Three again","description":"d","price_cents":{cheaper},"category":"kitchen"}}"#
        ),
    )
    .unwrap();
    let import = |sell: bool| {
        let mut cmd = app.shop();
        cmd.args(["items", "import", "--quiet"]).arg(&file);
        if sell {
            cmd.arg("--sell-retired");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        (stdout(&out), stderr(&out))
    };
    let (said, warned) = import(false);
    assert!(
        said.contains("0 added, 0 changed, 0 unchanged, 1 left retired"),
        "{said}"
    );
    assert!(
        warned.contains("1 line names a retired item, left retired and unchanged: 3;")
            && warned.contains("--sell-retired"),
        "{warned}"
    );
    assert_eq!(app.db.item(item(3)).await.unwrap().unwrap(), retired);
    let (server, addr) = crate::e2e::serve(app.shop(), &["--no-workers"]);
    assert_eq!(request(&addr, "GET", "/items/3", None, None).status, 410);

    let (said, warned) = import(true);
    assert!(
        said.contains("0 added, 1 changed, 0 unchanged, 0 left retired"),
        "{said}"
    );
    assert!(!warned.contains("retired"), "{warned}");
    let sold = app.db.item(item(3)).await.unwrap().unwrap();
    assert!(!sold.retired && sold.price_cents == cheaper && sold.title == "Three again");
    eventually(
        "the item's page is back",
        || request(&addr, "GET", "/items/3", None, None),
        |reply| reply.status == 200 && reply.body.contains("Three again"),
    );
    stop(server);
}

#[tokio::test]
async fn an_update_with_if_version_is_refused_once_the_item_changed_and_changes_nothing() {
    for db in TestDb::all().await {
        let app = seeded_on(db, 10).await;
        let kind = app.kind();
        let version = app.db.item(item(4)).await.unwrap().unwrap().version;
        let update = |price: &str, if_version: i64| {
            app.shop()
                .args(["items", "update", "4", "--price-cents", price])
                .args(["--if-version", &if_version.to_string()])
                .output()
                .unwrap()
        };
        let out = update("1111", version);
        assert!(out.status.success(), "{kind}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!("item 4 updated to version {}", version + 1)),
            "{kind}: {}",
            stdout(&out)
        );

        // A script that read the item before that change.
        let out = update("2222", version);
        assert_eq!(out.status.code(), Some(1), "{kind}: {}", stdout(&out));
        let said = stderr(&out);
        assert!(
            said.contains(&format!("item 4 is at version {}", version + 1))
                && said.contains("nothing was saved")
                && said.contains("price_cents 1111"),
            "{kind}: {said}"
        );
        let now = app.db.item(item(4)).await.unwrap().unwrap();
        assert_eq!(
            (now.price_cents, now.version),
            (1111, version + 1),
            "{kind}"
        );

        // Without --if-version, the later change wins (last writer wins).
        succeed(
            app.shop()
                .args(["items", "update", "4", "--price-cents", "3333"]),
        );
        let now = app.db.item(item(4)).await.unwrap().unwrap();
        assert_eq!(
            (now.price_cents, now.version),
            (3333, version + 2),
            "{kind}"
        );
    }
}

/// `shop items stock`: a count and a delivery, each shown by the running shop's
/// cached item page at once (out of stock, back in); a change that would leave
/// fewer than 0 units, an unknown item, or both flags or none, refused with
/// nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sold_out_item_is_restocked_and_its_cached_page_says_so_at_once() {
    let app = seeded_on(TestDb::sqlite(), 10).await;
    let (server, addr) = app.serve(&[]);
    // Item 3 ranks, so its page is cached.
    let _: () = redis::AsyncCommands::zadd(&mut app.redis.conn().await, "viewed:", 3, -50)
        .await
        .unwrap();
    let before = app.db.inventory_row(item(3)).await.unwrap().unwrap().stock;
    let cached = |says: &'static str| {
        eventually(
            says,
            || request(&addr, "GET", "/items/3", None, None),
            |page| page.header("x-cache") == Some("HIT".into()) && page.body.contains(says),
        )
    };
    cached("In stock");

    let out = succeed(app.shop().args(["items", "stock", "3", "--set", "0"]));
    assert_eq!(
        stdout(&out).trim(),
        format!("item 3: {before} units before, 0 now")
    );
    cached("Out of stock");
    let out = succeed(app.shop().args(["items", "stock", "3", "--add", "12"]));
    assert_eq!(stdout(&out).trim(), "item 3: 0 units before, 12 now");
    cached("In stock");

    for (args, says) in [
        (vec!["--add", "-13"], "item 3 has 12 units"),
        (vec!["--set", "-1"], "-1"),
        (vec!["--set", "5", "--add", "1"], "cannot be used with"),
        (vec![], "--add"),
    ] {
        let out = app
            .shop()
            .args(["items", "stock", "3"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    let out = app
        .shop()
        .args(["items", "stock", "99", "--add", "1"])
        .output()
        .unwrap();
    assert!(stderr(&out).contains("no item 99"), "{}", stderr(&out));
    let after = app.db.inventory_row(item(3)).await.unwrap().unwrap().stock;
    assert_eq!(after, 12, "the refused changes changed nothing");
    assert!(stop(server).success());
}

/// Ctrl-C (or SIGTERM) half-way through an import stops it between chunks:
/// what it wrote is whole chunks, and it says how many lines are written and
/// that running it again finishes it.
#[tokio::test]
async fn an_import_stopped_half_way_says_how_far_it_got() {
    let app = seeded_on(TestDb::sqlite(), 10).await;
    let lines: String = (11..=60_010)
        .map(|id| {
            format!(
                "{{\"id\":{id},\"title\":\"Item {id}\",\"description\":\"d\",\"price_cents\":100,\"category\":\"kitchen\"}}\n"
            )
        })
        .collect();
    let file = app.cwd.path().join("big.jsonl");
    std::fs::write(&file, lines).unwrap();
    let child = app
        .shop()
        .args(["items", "import", "--quiet"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once its first chunk is written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while app.db.item_count().await.unwrap() == 10 {
        assert!(std::time::Instant::now() < deadline, "no chunk written");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    let said = stderr(&out);
    let written: usize = said
        .split("the first ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(said.contains("running it again finishes it"), "{said}");
    assert!(written > 0 && written < 60_000, "{said}");
    assert_eq!(written % 500, 0, "whole chunks: {said}");
    assert_eq!(app.db.item_count().await.unwrap(), 10 + written as u64);
}
