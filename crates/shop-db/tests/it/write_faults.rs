//! Write drills: a checkout answered "placed" is a committed order, whatever fails.
//!
//! Each drill places orders while a write fault comes and goes (a full disk with a
//! reader pinning SQLite's WAL, an error raised half-way through a checkout, the
//! PostgreSQL connection killed in a transaction or in its commit, a statement
//! timeout during the commit), then does what a shopper told "try again" does
//! (retries each failed checkout with its idempotency key), restarts (closes the
//! database and opens it again) and compares every answer with the rows: no order
//! answered "placed" is missing (lost), and no order is in the table that no
//! answer said was placed (phantom).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shop_db::orders::CheckoutOutcome;
use shop_db::{Backend, Db, DbError};
use shop_domain::{ItemId, UserId};
use shop_testkit::{SmallDisk, TestDb};
use sqlx::{Connection, Row};

const NOW: i64 = 1_800_000_000;
/// The items the injected faults fire on: on SQLite an error that rolls the whole
/// transaction back (as `SQLITE_FULL` may), and one that fails only its statement.
const POISONED: [u64; 2] = [13, 14];

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// A cart of two lines; `poisoned` puts one of the faults' items in it.
fn cart(i: u64, poisoned: bool) -> Vec<(ItemId, u32)> {
    let first = if poisoned {
        POISONED[(i % 2) as usize]
    } else {
        1 + i % 10
    };
    vec![(item(first), 1), (item(20 + i % 10), 2)]
}

/// A seeded catalogue with plenty of stock, and a user (inserted directly).
async fn shop(db: &Db) -> UserId {
    db.seed(50, 1, &|_| {}).await.unwrap();
    sqlx::query("UPDATE inventory SET stock = 1000000")
        .execute(db.pool())
        .await
        .unwrap();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO users (name, password_hash, created_at) VALUES ('drill', 'x', 0) RETURNING id",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    UserId::from_i64(id).unwrap()
}

/// Every checkout of a drill: its key and cart, and what it was answered.
#[derive(Default)]
struct Answers {
    carts: BTreeMap<String, Vec<(ItemId, u32)>>,
    placed: BTreeMap<String, i64>,
    failed: Vec<(String, DbError)>,
}

impl Answers {
    /// Checks out `cart` under `key` and notes the answer; `true` if placed.
    async fn checkout(
        &mut self,
        db: &Db,
        user: UserId,
        key: &str,
        cart: Vec<(ItemId, u32)>,
    ) -> bool {
        let outcome = db
            .checkout(
                user,
                &cart,
                &db.cart_version(&cart).await.unwrap(),
                key,
                NOW,
            )
            .await;
        self.carts.insert(key.to_owned(), cart);
        match outcome {
            Ok(CheckoutOutcome::Placed { order_id, .. }) => {
                self.placed.insert(key.to_owned(), order_id);
                true
            }
            Ok(other) => panic!("{key}: unexpected {other:?}"),
            Err(e) => {
                self.failed.push((key.to_owned(), e));
                false
            }
        }
    }
}

/// What a drill found, after the retries and the restart.
#[derive(Debug)]
struct Audit {
    placed: usize,
    failed: usize,
    committed: usize,
    lost: usize,
    phantom: usize,
}

/// Retries every failed checkout with its key (the fault is over: each must be
/// placed now, or answer the order that was committed after all), reopens the
/// database and compares the answers with the `orders` table.
async fn audit(url: &str, db: Db, user: UserId, mut answers: Answers) -> Audit {
    let failed = answers.failed.len();
    for (key, _) in std::mem::take(&mut answers.failed) {
        let cart = answers.carts[&key].clone();
        assert!(
            answers.checkout(&db, user, &key, cart).await,
            "{key}: the retry after the fault failed: {:?}",
            answers.failed
        );
    }
    db.close().await;
    let db = Db::connect(url).await.unwrap();
    let rows = sqlx::query("SELECT idempotency_key, id FROM orders WHERE user_id = $1")
        .bind(user.to_i64())
        .fetch_all(db.read_pool())
        .await
        .unwrap();
    let committed: BTreeMap<String, i64> = rows
        .iter()
        .map(|r| (r.get("idempotency_key"), r.get("id")))
        .collect();
    db.close().await;
    let lost = answers
        .placed
        .iter()
        .filter(|(key, id)| committed.get(*key) != Some(id))
        .count();
    let phantom = committed
        .keys()
        .filter(|key| !answers.placed.contains_key(*key))
        .count();
    Audit {
        placed: answers.placed.len(),
        failed,
        committed: committed.len(),
        lost,
        phantom,
    }
}

fn assert_sound(what: &str, audit: &Audit) {
    eprintln!("{what}: {audit:?}");
    assert!(audit.failed > 0, "{what}: the fault never fired: {audit:?}");
    assert_eq!((audit.lost, audit.phantom), (0, 0), "{what}: {audit:?}");
    assert_eq!(audit.placed, audit.committed, "{what}: {audit:?}");
}

/// The first checkout after a fault ends is placed; how long it took.
async fn first_after_fault(answers: &mut Answers, db: &Db, user: UserId) -> Duration {
    let started = Instant::now();
    assert!(
        answers.checkout(db, user, "after-0", cart(0, false)).await,
        "the first checkout after the fault: {:?}",
        answers.failed.last()
    );
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_a_pinned_wal_loses_no_confirmed_order() {
    let Some(disk) = SmallDisk::mount(4) else {
        return;
    };
    let test_db = TestDb::sqlite_in(disk.path());
    let url = test_db.url().to_owned();
    let db = Db::connect(&url).await.unwrap();
    let user = shop(&db).await;
    let mut answers = Answers::default();
    for i in 0..5 {
        assert!(
            answers
                .checkout(&db, user, &format!("before-{i}"), cart(i, false))
                .await
        );
    }

    // A reader in a long transaction keeps the WAL from being reset, so every
    // commit must grow it; then the disk fills.
    let reader = test_db.pin_wal().await;
    disk.fill();
    for i in 0..40 {
        answers
            .checkout(&db, user, &format!("full-{i}"), cart(i, false))
            .await;
    }
    for (key, e) in &answers.failed {
        assert!(e.is_unavailable(), "{key}: a full disk is a 503: {e}");
    }
    let health = db.probe_write().await;
    assert!(
        health.is_err_and(|e| e.is_unavailable()),
        "the probe sees the full disk"
    );

    disk.free();
    let recovered = first_after_fault(&mut answers, &db, user).await;
    db.probe_write().await.unwrap();
    for i in 1..5 {
        assert!(
            answers
                .checkout(&db, user, &format!("after-{i}"), cart(i, false))
                .await
        );
    }
    reader.release().await;

    let audit = audit(&url, db, user, answers).await;
    eprintln!("disk full: first checkout after the space came back took {recovered:?}");
    assert_sound("sqlite, disk full", &audit);
}

/// Makes every write of an order line for a [`POISONED`] item fail half-way
/// through its checkout, as a failing disk would: on SQLite the first rolls the
/// whole transaction back (`RAISE(ROLLBACK)`), the second fails its statement only
/// (`RAISE(ABORT)`); on PostgreSQL both raise an exception with an I/O error's code.
async fn poison_order_lines(db: &Db) {
    let [rollback, abort] = POISONED;
    match db.backend() {
        Backend::Sqlite => {
            sqlx::query(&format!(
                "CREATE TRIGGER drill_poison BEFORE INSERT ON order_lines \
                 WHEN NEW.item_id IN ({rollback}, {abort}) BEGIN \
                 SELECT CASE WHEN NEW.item_id = {rollback} \
                 THEN RAISE(ROLLBACK, 'drill: injected write error') \
                 ELSE RAISE(ABORT, 'drill: injected write error') END; END"
            ))
            .execute(db.pool())
            .await
            .unwrap();
        }
        Backend::Postgres => {
            sqlx::query(
                "CREATE FUNCTION drill_poison() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN RAISE EXCEPTION 'drill: injected write error' USING ERRCODE = 'io_error'; END $$",
            )
            .execute(db.pool())
            .await
            .unwrap();
            sqlx::query(&format!(
                "CREATE TRIGGER drill_poison BEFORE INSERT ON order_lines FOR EACH ROW \
                 WHEN (NEW.item_id IN ({rollback}, {abort})) EXECUTE FUNCTION drill_poison()"
            ))
            .execute(db.pool())
            .await
            .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_error_half_way_through_a_checkout_loses_no_confirmed_order() {
    for test_db in TestDb::all().await {
        let kind = test_db.kind();
        let db = Db::connect(test_db.url()).await.unwrap();
        let user = shop(&db).await;
        poison_order_lines(&db).await;
        let mut answers = Answers::default();
        for i in 0..30 {
            let poisoned = i % 3 == 0;
            let placed = answers
                .checkout(&db, user, &format!("k-{i}"), cart(i, poisoned))
                .await;
            assert_eq!(placed, !poisoned, "{kind}: checkout {i}");
        }
        let cure = match db.backend() {
            Backend::Sqlite => "DROP TRIGGER drill_poison",
            Backend::Postgres => "DROP TRIGGER drill_poison ON order_lines",
        };
        sqlx::query(cure).execute(db.pool()).await.unwrap();
        first_after_fault(&mut answers, &db, user).await;
        let audit = audit(test_db.url(), db, user, answers).await;
        assert_sound(&format!("{kind}, injected error"), &audit);
    }
}

/// A deferred trigger on `orders` that runs `action` at `COMMIT` for orders whose
/// key starts with `prefix` (PostgreSQL only).
async fn at_commit(db: &Db, name: &str, prefix: &str, action: &str) {
    sqlx::query(&format!(
        "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN {action}; RETURN NULL; END $$"
    ))
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(&format!(
        "CREATE CONSTRAINT TRIGGER {name} AFTER INSERT ON orders \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW \
         WHEN (NEW.idempotency_key LIKE '{prefix}%') EXECUTE FUNCTION {name}()"
    ))
    .execute(db.pool())
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_connection_killed_in_a_transaction_or_its_commit_loses_no_confirmed_order() {
    let Some(test_db) = TestDb::postgres().await else {
        return;
    };
    let db = Db::connect(test_db.url()).await.unwrap();
    let user = shop(&db).await;
    // Half-way: the order line for the poisoned item kills its own connection.
    sqlx::query(
        "CREATE FUNCTION drill_kill() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$",
    )
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(&format!(
        "CREATE TRIGGER drill_kill BEFORE INSERT ON order_lines FOR EACH ROW \
         WHEN (NEW.item_id IN ({}, {})) EXECUTE FUNCTION drill_kill()",
        POISONED[0], POISONED[1]
    ))
    .execute(db.pool())
    .await
    .unwrap();
    // In the commit: orders keyed `commit-` kill their connection at COMMIT.
    at_commit(
        &db,
        "drill_kill_at_commit",
        "commit-",
        "PERFORM pg_terminate_backend(pg_backend_pid())",
    )
    .await;

    let mut answers = Answers::default();
    for i in 0..30 {
        let (key, poisoned) = match i % 3 {
            0 => (format!("mid-{i}"), true),
            1 => (format!("commit-{i}"), false),
            _ => (format!("ok-{i}"), false),
        };
        let placed = answers.checkout(&db, user, &key, cart(i, poisoned)).await;
        assert_eq!(placed, i % 3 == 2, "checkout {key}");
    }
    for (key, e) in &answers.failed {
        assert!(e.is_unavailable(), "{key}: a lost connection is a 503: {e}");
    }
    for trigger in [
        "drill_kill ON order_lines",
        "drill_kill_at_commit ON orders",
    ] {
        sqlx::query(&format!("DROP TRIGGER {trigger}"))
            .execute(db.pool())
            .await
            .unwrap();
    }
    first_after_fault(&mut answers, &db, user).await;
    let audit = audit(test_db.url(), db, user, answers).await;
    assert_sound("postgres, connection killed", &audit);
}

/// Cancels, from a connection of its own, every `COMMIT` of this database that is
/// sleeping in a deferred trigger, until `stop` says so. The error is the one a
/// statement timeout raises (57014): PostgreSQL itself switches `statement_timeout`
/// off before it commits, so a timeout cannot be had in a `COMMIT` any other way.
async fn cancel_sleeping_commits(url: String, stop: tokio::sync::watch::Receiver<bool>) -> u64 {
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut cancelled = 0;
    while !*stop.borrow() {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND query = 'COMMIT' AND state = 'active' AND wait_event = 'PgSleep') c",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        cancelled += n as u64;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    conn.close().await.unwrap();
    cancelled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_commit_cancelled_like_a_statement_timeout_loses_no_confirmed_order() {
    let Some(test_db) = TestDb::postgres().await else {
        return;
    };
    let db = Db::connect(test_db.url()).await.unwrap();
    let user = shop(&db).await;
    at_commit(&db, "drill_slow_commit", "slow-", "PERFORM pg_sleep(30)").await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let canceller = tokio::spawn(cancel_sleeping_commits(test_db.url().to_owned(), stopped));

    let mut answers = Answers::default();
    for i in 0..12 {
        let slow = i % 2 == 0;
        let key = if slow {
            format!("slow-{i}")
        } else {
            format!("ok-{i}")
        };
        let placed = answers.checkout(&db, user, &key, cart(i, false)).await;
        assert_eq!(placed, !slow, "checkout {key}");
    }
    for (key, e) in &answers.failed {
        assert!(
            matches!(e, DbError::CommitFailed(_)) && e.is_unavailable(),
            "{key}: a commit cut off half-way is a 503: {e}"
        );
    }
    stop.send(true).unwrap();
    assert_eq!(
        canceller.await.unwrap(),
        6,
        "every slow commit was cancelled once"
    );
    sqlx::query("DROP TRIGGER drill_slow_commit ON orders")
        .execute(db.pool())
        .await
        .unwrap();
    first_after_fault(&mut answers, &db, user).await;
    let audit = audit(test_db.url(), db, user, answers).await;
    assert_sound("postgres, commit cancelled", &audit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_connection_left_in_a_transaction_is_never_handed_out_again() {
    for test_db in TestDb::all().await {
        let kind = test_db.kind();
        let db = Db::connect(test_db.url()).await.unwrap();
        let user = shop(&db).await;
        // Some code outside the helper leaves a transaction open and gives the
        // connection back: on SQLite the pool's only write connection.
        let mut conn = db.write_pool().acquire().await.unwrap();
        sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
        sqlx::query("UPDATE inventory SET stock = 7 WHERE item_id = 1")
            .execute(&mut *conn)
            .await
            .unwrap();
        drop(conn);

        let mut answers = Answers::default();
        for i in 0..3 {
            let placed = answers
                .checkout(&db, user, &format!("k-{i}"), cart(i, false))
                .await;
            assert!(placed, "{kind}: {:?}", answers.failed);
        }
        let audit = audit(test_db.url(), db.clone(), user, answers).await;
        assert_eq!((audit.lost, audit.committed), (0, 3), "{kind}: {audit:?}");
        let db = Db::connect(test_db.url()).await.unwrap();
        let stock = db.inventory_row(item(1)).await.unwrap().unwrap().stock;
        assert_eq!(
            stock,
            1_000_000 - 1,
            "{kind}: the abandoned update was rolled back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_write_connections_are_reused_not_reopened() {
    let Some(test_db) = TestDb::postgres().await else {
        return;
    };
    let db = Db::connect(test_db.url()).await.unwrap();
    let user = shop(&db).await;
    let sessions = async || -> i64 {
        sqlx::query_scalar(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(db.read_pool())
        .await
        .unwrap()
    };
    let mut answers = Answers::default();
    answers.checkout(&db, user, "warm", cart(0, false)).await;
    let before = sessions().await;
    for i in 0..50 {
        assert!(
            answers
                .checkout(&db, user, &format!("k-{i}"), cart(i, false))
                .await
        );
    }
    // pg_stat_database counts a session when it ends; allow the pools' own churn
    // (a full CI run on this 2-core machine once saw 3: a connection replaced
    // under load). Not reusing clean connections would open one per checkout, 50.
    let opened = sessions().await - before;
    assert!(opened <= 8, "50 checkouts opened {opened} new connections");
}
