//! The binary's tools and server as a user runs them.

use std::process::Output;

use shop_testkit::{TestDb, TestRedis};

use crate::e2e::{Binary, request, seeded, seeded_on, stop};
use crate::shop;

fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = shop();
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn seed_fills_the_catalogue_once() {
    let db = TestDb::sqlite();
    let env = [("DATABASE_URL", db.url())];
    let first = stdout(&run(&["seed", "--items", "1500"], &env));
    assert!(first.contains("seeded 1500 new items"), "{first}");
    assert!(
        !first.contains("alice"),
        "no demo users unless asked: {first}"
    );
    let second = stdout(&run(&["seed", "--items", "1500", "--demo-users"], &env));
    assert!(second.contains("seeded 0 new items"), "{second}");
    assert!(second.contains("(catalogue: 1500 items)"), "{second}");
    assert!(
        second.contains("3 demo users added; demo logins: alice / alice-password"),
        "{second}"
    );
    let third = stdout(&run(&["seed", "--items", "1500", "--demo-users"], &env));
    assert!(third.contains("0 demo users added"), "{third}");
}

/// The layers of the settings, seen from outside: which Redis `shop rows list`
/// reaches when the file, the environment and a flag each name one (the others
/// are a port where nothing listens).
#[test]
fn flags_beat_the_environment_which_beats_the_settings_file() {
    let redis = TestRedis::start();
    let good = redis.url();
    let nowhere = "redis://127.0.0.1:1";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.toml");
    let config = file.display().to_string();
    let list = |file_url: &str, env: Option<&str>, flag: Option<&str>| {
        std::fs::write(&file, format!("[redis]\nredis_url = \"{file_url}\"\n")).unwrap();
        let mut args = vec!["rows", "--config", &config];
        if let Some(flag) = flag {
            args.extend(["--redis-url", flag]);
        }
        args.push("list");
        let envs: Vec<(&str, &str)> = env.map(|e| ("REDIS_URL", e)).into_iter().collect();
        run(&args, &envs)
    };
    assert!(list(&good, None, None).status.success(), "the file");
    let out = list(nowhere, None, None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach Redis at redis://127.0.0.1:1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        list(nowhere, Some(&good), None).status.success(),
        "the environment beats the file"
    );
    assert!(
        !list(&good, Some(nowhere), None).status.success(),
        "the environment beats the file"
    );
    assert!(
        list(nowhere, Some(nowhere), Some(&good)).status.success(),
        "the flag beats both"
    );
    assert!(
        !list(&good, Some(&good), Some(nowhere)).status.success(),
        "the flag beats both"
    );
}

#[test]
fn rows_schedule_list_and_unschedule() {
    let redis = TestRedis::start();
    let db = TestDb::sqlite();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str()), ("DATABASE_URL", db.url())];
    stdout(&run(&["seed", "--items", "50"], &env));
    stdout(&run(&["items", "remove", "7"], &env));
    let said = stdout(&run(&["rows", "schedule", "42", "5"], &env));
    assert!(said.contains("row 42 scheduled every 5 s"), "{said}");
    // A delay of 0 or less stops caching the row, and says so.
    let said = stdout(&run(&["rows", "schedule", "44", "--", "-1"], &env));
    assert!(said.contains("row 44 unscheduled"), "{said}");
    let listed = stdout(&run(&["rows", "list"], &env));
    let line = listed
        .lines()
        .find(|l| l.trim_start().starts_with("42"))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(line.contains(" 5 "), "{line}");
    stdout(&run(&["rows", "unschedule", "42"], &env));
    let listed = stdout(&run(&["rows", "list"], &env));
    assert!(
        listed.contains("-1"),
        "delay -1 until the refresher removes it: {listed}"
    );
    let bad = run(&["rows", "schedule", "0", "5"], &env);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("item id"));
    // A delay that is no number of seconds (NaN reached Redis's script) or
    // would have the refresher read the row without pause.
    for delay in ["nan", "inf", "-inf", "0.01", "86401"] {
        let bad = run(&["rows", "schedule", "43", "--", delay], &env);
        assert_eq!(bad.status.code(), Some(2), "{delay}");
        assert!(String::from_utf8_lossy(&bad.stderr).contains("give seconds"));
    }
    // An item that does not exist, or is no longer sold: refused, not said to
    // be scheduled (the refresher dropped the first, and cached the second's
    // row as if it were sold).
    for (id, said) in [("99999", "there is no item 99999"), ("7", "retired")] {
        let bad = run(&["rows", "schedule", id, "1"], &env);
        assert_eq!(bad.status.code(), Some(1), "{id}");
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(
            stderr.contains(said) && stderr.contains("nothing scheduled"),
            "{stderr}"
        );
    }
    let listed = stdout(&run(&["rows", "list"], &env));
    for id in ["43", "99999", "7 "] {
        assert!(
            !listed.lines().any(|l| l.trim_start().starts_with(id)),
            "{id}: {listed}"
        );
    }
}

/// The Redis, database and edge flags of `shop items` and `shop rows` are
/// taken after the subcommand, as those of `shop sale` and `shop users` are,
/// and before it, as before.
#[test]
fn settings_flags_follow_the_subcommand_or_come_before_it() {
    let redis = TestRedis::start();
    let db = TestDb::sqlite();
    let url = redis.url();
    let flags = ["--redis-url", url.as_str(), "--database-url", db.url()];
    stdout(&run(
        &["seed", "--items", "5", "--database-url", db.url()],
        &[],
    ));
    let after = [
        &["items", "update", "3", "--price-cents", "1234"][..],
        &flags,
    ]
    .concat();
    let said = stdout(&run(&after, &[]));
    assert!(said.contains("item 3 updated to version 2"), "{said}");
    let before = [
        &["items"][..],
        &flags,
        &["update", "3", "--price-cents", "1235"],
    ]
    .concat();
    let said = stdout(&run(&before, &[]));
    assert!(said.contains("item 3 updated to version 3"), "{said}");
    let said = stdout(&run(
        &[&["rows", "schedule", "3", "5"][..], &flags].concat(),
        &[],
    ));
    assert!(said.contains("row 3 scheduled every 5 s"), "{said}");
    let said = stdout(&run(
        &[
            &["sale", "start", "4", "--stock", "1", "--price-cents", "1"][..],
            &flags,
        ]
        .concat(),
        &[],
    ));
    assert!(said.contains("item 4"), "{said}");
}

#[test]
fn sale_start_refuses_an_unknown_item() {
    let redis = TestRedis::start();
    let db = TestDb::sqlite();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str()), ("DATABASE_URL", db.url())];
    stdout(&run(&["seed", "--items", "10"], &env));
    let ok = stdout(&run(
        &["sale", "start", "3", "--stock", "5", "--price-cents", "100"],
        &env,
    ));
    assert!(ok.contains("item 3 is on sale"), "{ok}");
    assert!(
        ok.contains("a new sale: the item had ")
            && ok.contains("are kept back until the sale ends"),
        "{ok}"
    );
    // Started again while it runs: the same sale, told so, with what it had.
    let again = stdout(&run(
        &["sale", "start", "3", "--stock", "7", "--price-cents", "90"],
        &env,
    ));
    assert!(
        again.contains("item 3 is on sale: 7 units at 90 cents"),
        "{again}"
    );
    assert!(
        again.contains("has these terms now (5 units were left in it; ")
            && again.contains("still counts toward the limit"),
        "{again}"
    );
    let missing = run(
        &[
            "sale",
            "start",
            "11",
            "--stock",
            "5",
            "--price-cents",
            "100",
        ],
        &env,
    );
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("there is no item 11"));
    // Terms no sale has are refused before anything is written: minutes that
    // overflowed the end time (a sale that ended before it began, or half
    // written when Redis refused its expiry), a price no item can have, a
    // refresh that is no number of seconds.
    let sale_of_4 = |flag: &str, value: &str| {
        let mut terms = vec![("--stock", "5"), ("--price-cents", "100")];
        terms.retain(|(given, _)| *given != flag);
        terms.push((flag, value));
        let mut args = vec!["sale", "start", "4"];
        args.extend(terms.iter().flat_map(|(flag, value)| [*flag, *value]));
        run(&args, &env)
    };
    for (flag, value) in [
        ("--minutes", "9223372036854775807"),
        ("--minutes", "153722867280912930"),
        ("--minutes", "527041"),
        ("--price-cents", "1000000001"),
        ("--stock", "1000000001"),
        ("--stock", "99999999999"),
        ("--refresh", "nan"),
        ("--refresh", "0"),
    ] {
        let refused = sale_of_4(flag, value);
        assert_eq!(refused.status.code(), Some(2), "{flag} {value}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains(flag), "{flag} {value}: {said}");
    }
    // A sale charges less than the item's regular price, never more.
    let dearer = sale_of_4("--price-cents", "1000000000");
    assert_eq!(dearer.status.code(), Some(1));
    let said = String::from_utf8_lossy(&dearer.stderr);
    assert!(
        said.contains("item 4's regular price is") && said.contains("nothing was changed"),
        "{said}"
    );
    let mut redis_conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let sale_keys: Vec<String> = redis::cmd("KEYS")
        .arg("sale:*4*")
        .query(&mut redis_conn)
        .unwrap();
    assert_eq!(
        sale_keys,
        Vec::<String>::new(),
        "nothing of a sale of item 4"
    );
    let longest = stdout(&run(
        &[
            "sale",
            "start",
            "4",
            "--stock",
            "5",
            "--price-cents",
            "100",
            "--minutes",
            "527040",
        ],
        &env,
    ));
    assert!(longest.contains("item 4 is on sale"), "{longest}");
}

/// A command whose reader went away before its answer (`| head -1`, a closed
/// pipe) ends quietly with a broken pipe's code once its work is done, not
/// with a panic and a backtrace.
#[test]
fn a_command_whose_reader_went_away_ends_quietly() {
    let redis = TestRedis::start();
    let db = TestDb::sqlite();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str()), ("DATABASE_URL", db.url())];
    stdout(&run(&["seed", "--items", "10"], &env));
    let mut cmd = shop();
    cmd.args(["sale", "start", "3", "--stock", "5", "--price-cents", "100"])
        .envs(env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // The read end closed before the command (which connects first) writes.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{said}");
    assert!(!said.contains("panicked"), "{said}");
    // Its work was done: the sale runs (started again, it is the same sale).
    let again = stdout(&run(
        &["sale", "start", "3", "--stock", "5", "--price-cents", "100"],
        &env,
    ));
    assert!(again.contains("has these terms now"), "{again}");
}

#[tokio::test]
async fn serve_answers_on_the_printed_address_and_stops_on_sigterm() {
    let shop = seeded(20).await;
    let (server, addr, metrics) = crate::e2e::serve_with_metrics(shop.shop(), &[]);

    // The public health check says the status only; which part is failing, and
    // /metrics, are on the operators' listener, on 127.0.0.1 and its own port.
    let health = request(&addr, "GET", "/healthz", None, None);
    assert_eq!(health.status, 200, "{}", health.body);
    assert_eq!(health.body, r#"{"status":"ok"}"#);
    assert_eq!(request(&addr, "GET", "/metrics", None, None).status, 404);
    assert!(metrics.starts_with("127.0.0.1:"), "{metrics}");
    assert_ne!(metrics, addr);
    let detailed = request(&metrics, "GET", "/healthz", None, None);
    assert!(
        detailed.body.contains("\"redis\":true") && detailed.body.contains("\"database\":\"ok\""),
        "{}",
        detailed.body
    );
    let scraped = request(&metrics, "GET", "/metrics", None, None);
    assert_eq!(scraped.status, 200);
    assert!(scraped.body.contains("shop_sessions"), "{}", scraped.body);
    let flash = request(&addr, "GET", "/flash", None, None);
    assert_eq!(flash.status, 200, "{}", flash.body);
    assert!(flash.body.contains("Flash sale"));
    assert!(stop(server).success());
}

/// Runs `cmd` with `line` on its standard input (as a password is given).
fn with_stdin(cmd: &mut std::process::Command, line: &str) -> Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{line}").unwrap();
    child.wait_with_output().unwrap()
}

/// `shop users add NAME` with `password` on standard input.
fn add_user(db: &TestDb, name: &str, password: &str, extra: &[&str]) -> Output {
    with_stdin(
        shop()
            .args(["users", "add", name])
            .args(extra)
            .env("DATABASE_URL", db.url()),
        password,
    )
}

/// `shop users set-password NAME`: a new password from standard input, and every
/// session of the account logged out (a stolen session dies with the old password).
#[tokio::test]
async fn users_set_password_logs_the_account_out_everywhere() {
    let shop = seeded(10).await;
    let phone = shop.logged_in("jo").await;
    let laptop = shop.log_in("jo").await;
    let other = shop.logged_in("kim").await;
    let set = |name: &str, password: &str| {
        with_stdin(shop.shop().args(["users", "set-password", name]), password)
    };
    let short = set("jo", "short");
    assert!(!short.status.success());
    assert!(String::from_utf8_lossy(&short.stderr).contains("at least 10"));
    let nobody = set("nobody", "long-enough-password");
    assert!(String::from_utf8_lossy(&nobody.stderr).contains("no user \"nobody\""));
    assert_eq!(
        shop.me(&phone).await["user"]["name"],
        "jo",
        "nothing changed yet"
    );

    let out = stdout(&set("jo", "long-enough-password"));
    assert!(out.contains("2 session(s) logged out"), "{out}");
    for cookie in [&phone, &laptop] {
        assert_eq!(shop.me(cookie).await["user"], serde_json::Value::Null);
    }
    assert_eq!(shop.me(&other).await["user"]["name"], "kim");
    assert!(
        shop.db
            .check_password("jo", "long-enough-password")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn users_add_and_grant_admin() {
    let db = TestDb::sqlite();
    let env = [("DATABASE_URL", db.url())];
    stdout(&run(&["seed", "--items", "10", "--demo-users"], &env));

    let out = add_user(&db, "Boss", "long-enough-password", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lowercase letters"));
    let out = add_user(&db, "boss", "short", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 10"));

    let added = stdout(&add_user(&db, "boss", "long-enough-password", &["--admin"]));
    assert!(added.contains("added boss (admin)"), "{added}");
    let taken = add_user(&db, "boss", "another-password", &[]);
    assert!(String::from_utf8_lossy(&taken.stderr).contains("taken"));

    let granted = stdout(&run(&["users", "grant-admin", "alice"], &env));
    assert!(granted.contains("alice is an admin"), "{granted}");
    let unknown = run(&["users", "grant-admin", "nobody"], &env);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no user \"nobody\""));

    // The new account logs in with the password given on standard input, and
    // both admins see /ops.
    let shop = seeded_on(db, 10).await;
    let (server, addr) = shop.serve(&[]);
    for (name, password) in [
        ("boss", "long-enough-password"),
        ("alice", "alice-password"),
    ] {
        let login = request(
            &addr,
            "POST",
            "/login",
            None,
            Some(&format!("name={name}&password={password}")),
        );
        let cookie = login.session_cookie().expect("logs in");
        let ops = request(&addr, "GET", "/ops", Some(&cookie), None);
        assert_eq!(ops.status, 200, "{name}: {}", ops.body);
    }
    assert!(stop(server).success());
}

/// `shop migrate`: the database's schema, and the insight counts of the old layout
/// (no week, no expiry) removed from Redis, leaving the windowed ones; twice is
/// harmless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_removes_the_old_layouts_keys_once() {
    let redis = TestRedis::start();
    let db = TestDb::sqlite();
    let mut raw = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for key in ["viewers:1", "buyers:1", "viewers:2", "viewers:1:2900"] {
        let _: () = redis::cmd("PFADD")
            .arg(key)
            .arg("AAAAAAAAAAAAAAAAAAAAAA")
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let env = [
        ("REDIS_URL", redis.url()),
        ("DATABASE_URL", db.url().to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let first = stdout(&run(&["migrate"], &env));
    assert!(first.contains("database: migrated"), "{first}");
    assert!(first.contains("removed 3 insight counts"), "{first}");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(left, vec!["viewers:1:2900".to_owned()]);
    let again = stdout(&run(&["migrate"], &env));
    assert!(again.contains("removed 0 insight counts"), "{again}");
}

/// A password given in any part of a connection URL (before the `@`, or as a
/// query parameter the drivers accept) never reaches the output: not in the
/// errors of a run that cannot connect, not in `--help` (which shows the
/// environment's values of other flags).
#[test]
fn passwords_in_urls_never_reach_the_output() {
    let cwd = tempfile::tempdir().unwrap();
    let runs: [(&str, &str, &[&str]); 5] = [
        (
            "REDIS_URL",
            "redis://127.0.0.1:1/0?password=hunter2a",
            &["serve", "--bind", "127.0.0.1:0"],
        ),
        (
            "REDIS_URL",
            "redis://user:hunter2b@127.0.0.1:1",
            &["serve", "--bind", "127.0.0.1:0"],
        ),
        (
            "DATABASE_URL",
            "postgres://shop@127.0.0.1:1/shop?password=hunter2c&sslpassword=hunter2d",
            &["seed", "--items", "5"],
        ),
        (
            "SHOP_CACHE_REDIS_URL",
            "redis://:hunter2e@127.0.0.1:1",
            &["serve", "--help"],
        ),
        (
            "SHOP_REDIS_CLUSTER",
            "redis://:hunter2h@127.0.0.1:7000,127.0.0.1:7001",
            &["serve", "--help"],
        ),
    ];
    for (var, url, args) in runs {
        let out = shop()
            .current_dir(cwd.path())
            .env(var, url)
            .env("SHOP_LOG", "debug")
            .args(args)
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !all.contains("hunter2"),
            "{var} in `shop {}`:\n{all}",
            args.join(" ")
        );
        if args.contains(&"--help") {
            assert!(out.status.success());
        } else {
            assert!(!out.status.success(), "{all}");
            assert!(
                all.contains("***"),
                "the error names the URL, redacted: {all}"
            );
        }
    }
    // And the help shows no value of the URL flags from the environment at all.
    let help = shop()
        .env("REDIS_URL", "redis://h:6379?token=hunter2f")
        .env("DATABASE_URL", "postgres://u:hunter2g@db/x")
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        !text.contains("hunter2") && !text.contains("redis://h:6379"),
        "{text}"
    );
}

/// An item page's touch is held back (written behind every 100 ms): a graceful
/// stop right after the views writes every one of them, in order, with the views'
/// counts.
#[tokio::test]
async fn a_graceful_stop_writes_the_item_pages_held_touches() {
    let shop = seeded(20).await;
    let (server, addr) = crate::e2e::serve(shop.shop(), &[]);
    let cookie = request(&addr, "GET", "/", None, None)
        .session_cookie()
        .expect("a new visitor gets a cookie");
    for id in [3, 4, 5] {
        let page = request(&addr, "GET", &format!("/items/{id}"), Some(&cookie), None);
        assert_eq!(page.status, 200);
    }
    assert!(stop(server).success());
    let token = cookie.split_once('=').unwrap().1.to_owned();
    let mut raw = shop.redis.conn().await;
    let history: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("viewed:{token}"))
        .arg(0)
        .arg(-1)
        .arg("REV")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(history, ["5", "4", "3"]);
    let seen: Option<f64> = redis::cmd("ZSCORE")
        .arg("recent:")
        .arg(&token)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(seen.is_some(), "the session was touched");
    let counted: Option<f64> = redis::cmd("ZSCORE")
        .arg("viewed:")
        .arg(4)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(counted, Some(-1.0));
}

/// Run where there is no database (another directory, a mistyped path), a
/// command that changes a shop's accounts or sales says so, naming the
/// database, and makes nothing; one that may start a shop says it made one.
#[test]
fn a_command_run_where_no_database_is_says_so_and_makes_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data").join("shop.db");
    let url = format!("sqlite:{}", path.display());
    let redis = TestRedis::start();
    let redis_url = redis.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("REDIS_URL", redis_url.as_str()),
    ];
    for args in [
        &["users", "grant-admin", "alice"][..],
        &["users", "add", "zed"],
        &["sale", "start", "3", "--stock", "5", "--price-cents", "100"],
        &["sale", "stop", "3"],
        &["rows", "schedule", "3", "1"],
        &["items", "update", "3", "--price-cents", "100"],
        &["items", "stock", "3", "--add", "5"],
        &["items", "remove", "3"],
        &["items", "purge", "3"],
    ] {
        let out = run(args, &env);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            said.contains(&format!("there is no database at {}", path.display())),
            "{args:?}: {said}"
        );
        assert!(!path.exists(), "{args:?} made a database");
    }
    let seeded = run(&["seed", "--items", "10"], &env);
    stdout(&seeded);
    assert!(
        String::from_utf8_lossy(&seeded.stderr).contains("a new, empty one is made there"),
        "{}",
        String::from_utf8_lossy(&seeded.stderr)
    );
    assert!(path.exists());
}
