//! `shop serve` as a real process on a free port: a shopper's whole walk, and the
//! private redis-server it manages when no Redis is configured.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shop_db::Db;
use shop_testapp::TestApp;
use shop_testkit::TestDb;

use crate::shop;

/// A response of the minimal client below.
pub struct Reply {
    pub status: u16,
    head: String,
    pub body: String,
}

impl Reply {
    /// The `name=value` of the cookie `name` the answer sets, if it sets one.
    pub fn set_cookie(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            let pair = v.trim().split(';').next()?;
            (k.eq_ignore_ascii_case("set-cookie") && pair.starts_with(&format!("{name}=")))
                .then(|| pair.to_owned())
        })
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    pub fn session_cookie(&self) -> Option<String> {
        self.head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
            .map(|(_, v)| v.trim())
            .find(|v| v.starts_with("shop_session="))
            .map(|v| v.split(';').next().unwrap().to_owned())
    }
}

/// Polls `get` until `done` holds, for 10 seconds at most: the row refresher and
/// the view flusher are daemons (their effect arrives within a second), and a
/// server's in-process page tier drops a purged page as the purge's event arrives
/// (within milliseconds of the command's return).
pub fn eventually(what: &str, get: impl FnMut() -> Reply, done: impl Fn(&Reply) -> bool) -> Reply {
    eventually_within(what, Duration::from_secs(10), get, done)
}

/// [`eventually`] with a deadline of `within`.
pub fn eventually_within(
    what: &str,
    within: Duration,
    mut get: impl FnMut() -> Reply,
    done: impl Fn(&Reply) -> bool,
) -> Reply {
    let deadline = Instant::now() + within;
    loop {
        let reply = get();
        if done(&reply) {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: last answer {} {}",
            reply.status,
            reply.body
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 request on a fresh connection, read to the end.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&str>,
) -> Reply {
    request_with(addr, method, path, cookie, form, &[])
}

/// [`request`] with extra request headers (a `Host` among them replaces the
/// address).
pub fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&str>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let host = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("host"))
        .map_or(addr, |(_, value)| *value);
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(c) = cookie {
        req.push_str(&format!("Cookie: {c}\r\n"));
    }
    for (name, value) in headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("host"))
    {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = form.unwrap_or("");
    if form.is_some() {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    Reply {
        status: head[9..12].parse().unwrap(),
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// A shop for the binary: a [`TestApp`] whose catalogue is the one `shop seed
/// --items <items>` makes, on a new SQLite file.
pub async fn seeded(items: u64) -> TestApp {
    seeded_on(TestDb::sqlite(), items).await
}

/// The same on `db` (SQLite or PostgreSQL).
pub async fn seeded_on(db: TestDb, items: u64) -> TestApp {
    TestApp::builder()
        .items(items)
        .catalogue_seed(shop_db::seed::DEFAULT_SEED)
        .start_on(db)
        .await
}

/// What the binary's tests do with a [`TestApp`].
pub trait Binary {
    /// `shop` pointed at the app's Redis, database and working directory.
    fn shop(&self) -> Command;
    /// `shop serve` on a free port, with `extra` flags; returns it and its address.
    fn serve(&self, extra: &[&str]) -> (Served, String);
    /// `shop sale start ITEM --stock STOCK --price-cents 100`.
    fn sale_start(&self, item: &str, stock: &str);
}

impl Binary for TestApp {
    fn shop(&self) -> Command {
        self.command(env!("CARGO_BIN_EXE_shop"))
    }

    fn serve(&self, extra: &[&str]) -> (Served, String) {
        serve(self.shop(), extra)
    }

    fn sale_start(&self, item: &str, stock: &str) {
        succeed(self.shop().args([
            "sale",
            "start",
            item,
            "--stock",
            stock,
            "--price-cents",
            "100",
        ]));
    }
}

/// Runs `cmd` to its end and asserts it succeeded (showing its stderr if not).
pub fn succeed(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Starts `cmd` as `shop serve` on a free port; returns it and its address. No
/// demo sale unless `extra` asks for one (tests start the sales they look at).
pub fn serve(cmd: Command, extra: &[&str]) -> (Served, String) {
    let (child, addr, _) = serve_with_metrics(cmd, extra);
    (child, addr)
}

/// [`serve`], also returning the address of its operators' listener (`/metrics`),
/// which `serve` prints before its own.
pub fn serve_with_metrics(cmd: Command, extra: &[&str]) -> (Served, String, String) {
    let (child, addr, printed) = serve_printing(cmd, extra);
    (child, addr, metrics_address(&printed))
}

/// The operators' address among the lines `shop serve` printed.
fn metrics_address(printed: &[String]) -> String {
    printed
        .iter()
        .find_map(|line| line.split("metrics at http://").nth(1))
        .map(|rest| rest.trim_end_matches("/metrics").to_owned())
        .unwrap_or_default()
}

/// [`serve`], also returning the lines it printed before it served.
pub fn serve_printing(cmd: Command, extra: &[&str]) -> (Served, String, Vec<String>) {
    serve_into(cmd, extra, None)
}

/// [`serve_with_metrics`], also keeping every line the server logs (its
/// stderr) in the returned list as it comes.
pub fn serve_logged(
    cmd: Command,
    extra: &[&str],
) -> (Served, String, String, Arc<Mutex<Vec<String>>>) {
    let log = Arc::<Mutex<Vec<String>>>::default();
    let (child, addr, printed) = serve_into(cmd, extra, Some(log.clone()));
    (child, addr, metrics_address(&printed), log)
}

fn serve_into(
    mut cmd: Command,
    extra: &[&str],
    log: Option<Arc<Mutex<Vec<String>>>>,
) -> (Served, String, Vec<String>) {
    cmd.args(["serve", "--bind", "127.0.0.1:0"]).args(extra);
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let addr = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("shop serve exited before printing its address: {printed:?}"))
            .unwrap();
        if let Some(rest) = line.split("serving at http://").nth(1) {
            break rest.trim_end_matches('/').to_owned();
        }
        printed.push(line);
    };
    // Keep draining stdout and stderr so the server never blocks on a full pipe
    // (a drill makes it log).
    std::thread::spawn(move || for _ in lines {});
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
                if let Some(log) = &log {
                    log.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&line).into_owned());
                }
            }
        });
    }
    (Served(Some(child)), addr, printed)
}

/// A `shop serve` a test started: killed (and its private Redis with it, by the
/// server's own shutdown) when the test ends without stopping it, a failed
/// assertion included, so a failing test leaves no server running behind it.
pub struct Served(Option<Child>);

impl std::ops::Deref for Served {
    type Target = Child;

    fn deref(&self) -> &Child {
        self.0.as_ref().expect("a running server")
    }
}

impl std::ops::DerefMut for Served {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("a running server")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take()
            && child.try_wait().ok().flatten().is_none()
        {
            // SIGTERM first, so a managed Redis is stopped by the server itself.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Stops a server with SIGTERM and waits (at most 15 s) for it to exit.
pub fn stop(mut served: Served) -> ExitStatus {
    let child = served.0.take().expect("a running server");
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let mut child = child;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "shop serve did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A session cookie of the demo user `name` (password `<name>-password`).
pub fn log_in(addr: &str, name: &str) -> String {
    let form = format!("name={name}&password={name}-password");
    // A shop just started on a loaded machine may answer 503 (a store past its
    // budget): the login is sent again. Any answer carries a cookie (a guest's
    // for a refused login), so only a login's redirect is taken.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let login = request(addr, "POST", "/login", None, Some(&form));
        match login.status {
            303 => {
                return login
                    .session_cookie()
                    .unwrap_or_else(|| panic!("{name}'s login sets no cookie: {}", login.body));
            }
            503 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            status => panic!("{name} logs in: {status} {}", login.body),
        }
    }
}

/// A checkout's form as the cart page shown now posts it: `key` and the page's
/// `cart_version` (none when the page cannot be read, as in an outage).
pub fn checkout_form(addr: &str, cookie: &str, key: &str) -> String {
    let page = request(addr, "GET", "/cart", Some(cookie), None);
    match shop_testapp::cart_version_in(&page.body) {
        Some(version) => format!("key={key}&cart_version={version}"),
        None => format!("key={key}"),
    }
}

/// Runs `shop seed --items <items>` through `cmd`.
pub fn seed(mut cmd: Command, items: &str) {
    let out = cmd
        .args(["seed", "--items", items, "--demo-users"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The middle of a shopper's walk, from a guest session that viewed item 5: two of
/// item 5 into the cart, a login as alice (a new token; the cart and history move
/// with it), then checkout. Returns alice's session cookie.
pub fn add_log_in_and_check_out(addr: &str, guest: &str) -> String {
    let add = request(addr, "POST", "/cart", Some(guest), Some("item=5&count=2"));
    assert_eq!(
        (add.status, add.header("location").as_deref()),
        (303, Some("/cart"))
    );

    let login = request(
        addr,
        "POST",
        "/login",
        Some(guest),
        Some("name=alice&password=alice-password&next=/cart"),
    );
    assert_eq!(login.status, 303, "{}", login.body);
    let user = login.session_cookie().expect("login issues a new token");
    assert_ne!(user, guest);

    let me = request(addr, "GET", "/api/me", Some(&user), None);
    let me: serde_json::Value = serde_json::from_str(&me.body).unwrap();
    assert_eq!(me["user"]["name"], "alice");
    assert_eq!(
        me["cart"]["lines"],
        serde_json::json!([{"item": 5, "quantity": 2}]),
        "cart kept under the new token"
    );

    let cart = request(addr, "GET", "/cart", Some(&user), None);
    let key = cart
        .body
        .split("name=\"key\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a checkout form")
        .to_owned();
    let version = shop_testapp::cart_version_in(&cart.body).expect("a checkout form");
    let checkout = request(
        addr,
        "POST",
        "/checkout",
        Some(&user),
        Some(&format!("key={key}&cart_version={version}")),
    );
    assert_eq!(checkout.status, 303);
    let placed = checkout.header("location").unwrap_or_default();
    assert!(placed.starts_with("/account?placed="), "{placed}");
    user
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shopper_views_adds_logs_in_and_checks_out() {
    let shop = seeded(30).await;
    let (child, addr) = shop.serve(&[]);

    let item = request(&addr, "GET", "/items/5", None, None);
    assert_eq!(item.status, 200, "{}", item.body);
    // The page is the same for everyone, says so and carries no cookie; the
    // visitor's cookie comes with the page's `/api/me` call.
    assert_eq!(item.session_cookie(), None);
    let shared = item.header("cache-control").unwrap_or_default();
    assert!(
        shared.starts_with("public, max-age=0, s-maxage="),
        "{shared}"
    );
    assert!(
        item.header("surrogate-key")
            .is_some_and(|k| k.split(' ').any(|t| t == "i5"))
    );
    let guest = request(&addr, "GET", "/api/me", None, None)
        .session_cookie()
        .expect("a visitor gets a cookie");
    let user = add_log_in_and_check_out(&addr, &guest);
    let account = request(&addr, "GET", "/account", Some(&user), None);
    assert!(account.body.contains("Hello, alice"), "{}", account.body);

    assert!(stop(child).success());
    let db = Db::connect(shop.test_db.url()).await.unwrap();
    let alice = db
        .check_password("alice", "alice-password")
        .await
        .unwrap()
        .unwrap();
    let orders = db.orders_of(alice, 10).await.unwrap();
    assert_eq!(orders.len(), 1, "one order in the database");
    assert_eq!(orders[0].units, 2);
    let lines = db.order_lines(orders[0].id).await.unwrap();
    assert_eq!(
        lines
            .iter()
            .map(|(i, q, _)| (i.get(), *q))
            .collect::<Vec<_>>(),
        vec![(5, 2)]
    );
}

/// What a managed `redis-server` says `CONFIG GET name` is, asked on its socket.
fn config_of(dir: &Path, name: &str) -> String {
    let client =
        redis::Client::open(format!("unix://{}", dir.join("redis.sock").display())).unwrap();
    let mut conn = client.get_connection().unwrap();
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query(&mut conn)
        .unwrap();
    pair.get(1).cloned().unwrap_or_default()
}

/// Waits until the process `pid` is gone (or a zombie).
fn wait_gone(pid: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Path::new(&format!("/proc/{pid}/status")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .contains("State:\tZ")
    {
        assert!(Instant::now() < deadline, "{what} {pid} is still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until a file of the append-only directory `dir` holds `text`.
fn wait_in_append_only_file(dir: &Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let holds = || {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|file| {
                std::fs::read(file.path()).is_ok_and(|bytes| {
                    bytes
                        .windows(text.len())
                        .any(|window| window == text.as_bytes())
                })
            })
    };
    while !holds() {
        assert!(
            Instant::now() < deadline,
            "{text} never reached the append-only file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_manages_its_own_redis_pair_keeps_carts_across_a_crash_and_leaves_no_orphan() {
    let cwd = tempfile::tempdir().unwrap();
    let in_cwd = || {
        let mut cmd = shop();
        cmd.current_dir(cwd.path());
        cmd
    };
    seed(in_cwd(), "20");
    let (child, addr) = serve(in_cwd(), &["--managed-redis", "--managed-cache-mb", "8"]);
    let health = request(&addr, "GET", "/healthz", None, None);
    assert_eq!(health.status, 200, "{}", health.body);
    assert!(health.body.contains("\"status\":\"ok\""));

    let state_dir = cwd.path().join("data/redis");
    let cache_dir = cwd.path().join("data/redis-cache");
    let pid_of = |dir: &Path| {
        std::fs::read_to_string(dir.join("redis.pid"))
            .unwrap()
            .trim()
            .to_owned()
    };
    let (state_pid, cache_pid) = (pid_of(&state_dir), pid_of(&cache_dir));
    for pid in [&state_pid, &cache_pid] {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "the private redis-server runs"
        );
    }
    // The two roles: state never evicts and logs every write; the cache evicts.
    assert_eq!(config_of(&state_dir, "appendonly"), "yes");
    assert_eq!(config_of(&state_dir, "appendfsync"), "everysec");
    assert_eq!(config_of(&state_dir, "maxmemory-policy"), "noeviction");
    assert_eq!(config_of(&cache_dir, "maxmemory-policy"), "allkeys-lru");
    assert_eq!(config_of(&cache_dir, "maxmemory"), (8u64 << 20).to_string());

    // A cart, then the state Redis killed outright (no save on the way out).
    let cart = request(&addr, "POST", "/cart", None, Some("item=3&count=2"));
    assert_eq!(cart.status, 303, "{}", cart.body);
    let cookie = cart.session_cookie().expect("the cart's session");
    // `appendfsync everysec` may hold a write back while an fsync is slow (a
    // busy machine), answering meanwhile: what the append-only file promises
    // is what reached it, so the kill waits for the cart to be there.
    let aof = Path::new(&config_of(&state_dir, "dir")).join(config_of(&state_dir, "appenddirname"));
    wait_in_append_only_file(&aof, cookie.split('=').nth(1).unwrap());
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &state_pid])
            .status()
            .unwrap()
            .success()
    );
    wait_gone(&state_pid, "the killed redis-server");
    assert!(stop(child).success());
    wait_gone(&cache_pid, "the cache redis-server");

    // Started again: the append-only file brings the cart back.
    let (child, addr) = serve(in_cwd(), &["--managed-redis"]);
    let me = request(&addr, "GET", "/api/me", Some(&cookie), None);
    assert_eq!(me.status, 200, "{}", me.body);
    assert!(
        me.body.contains("\"quantity\":2"),
        "the cart survived: {}",
        me.body
    );
    let (state_pid, cache_pid) = (pid_of(&state_dir), pid_of(&cache_dir));
    assert!(stop(child).success());
    wait_gone(&state_pid, "redis-server outlived the shop:");
    wait_gone(&cache_pid, "redis-server outlived the shop:");
}

#[test]
fn without_redis_server_installed_serve_says_how_to_get_it() {
    let cwd = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = shop()
        .current_dir(cwd.path())
        .env("PATH", empty.path())
        .args(["serve", "--managed-redis", "--bind", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("apt-get install redis-server"), "{stderr}");
    assert!(stderr.contains("REDIS_URL"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn a_new_shop_runs_one_demo_sale_and_keeps_it_across_restarts() {
    let shop = seeded(50).await;
    let (child, addr) = shop.serve(&["--demo-sale", "true"]);
    let page = request(&addr, "GET", "/flash", None, None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Demo sale"), "{}", page.body);
    assert!(page.body.contains("data-item=\"1\""), "{}", page.body);
    let state = request(&addr, "GET", "/api/flash/1", None, None);
    assert_eq!(state.status, 200, "{}", state.body);
    assert!(state.body.contains("\"stock\":100"), "{}", state.body);
    let alice = log_in(&addr, "alice");
    let bought = request_with(
        &addr,
        "POST",
        "/api/flash/1/buy",
        Some(&alice),
        Some(""),
        &[
            ("Idempotency-Key", "demo-1"),
            ("Accept", "application/json"),
        ],
    );
    assert_eq!(bought.status, 200, "{}", bought.body);
    assert!(stop(child).success());

    // A restart finds the sale running and leaves it as it is.
    let (child, addr) = shop.serve(&["--demo-sale", "true"]);
    let state = request(&addr, "GET", "/api/flash/1", None, None);
    assert!(state.body.contains("\"stock\":99"), "{}", state.body);
    assert!(stop(child).success());
}

/// A data set kept by an older shop (a snapshot, no append-only file) survives the
/// first start of the managed Redis with its append-only file on.
#[test]
fn the_managed_state_redis_keeps_an_older_snapshot_when_it_turns_on_its_append_only_file() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path().join("data/redis");
    std::fs::create_dir_all(&dir).unwrap();
    // The older shop's Redis: a snapshot only, holding one cart.
    let old = shop_redis_server::Launch::new(&dir, "redis.sock", "");
    let mut child = old.start().unwrap();
    let client = redis::Client::open(old.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("HSET")
        .arg("cart:AAAAAAAAAAAAAAAAAAAAAA")
        .arg(3)
        .arg(2)
        .query(&mut conn)
        .unwrap();
    // Seen just now (a session idle for longer than its lifetime would be refused).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let _: () = redis::cmd("ZADD")
        .arg("recent:")
        .arg(now)
        .arg("AAAAAAAAAAAAAAAAAAAAAA")
        .query(&mut conn)
        .unwrap();
    let _: Result<(), _> = redis::cmd("SHUTDOWN").arg("SAVE").query(&mut conn);
    child.wait().unwrap();
    assert!(dir.join("dump.rdb").exists() && !dir.join("appendonlydir").exists());

    let in_cwd = || {
        let mut cmd = shop();
        cmd.current_dir(cwd.path());
        cmd
    };
    seed(in_cwd(), "20");
    let (child, addr) = serve(in_cwd(), &["--managed-redis"]);
    let me = request(
        &addr,
        "GET",
        "/api/me",
        Some("shop_session=AAAAAAAAAAAAAAAAAAAAAA"),
        None,
    );
    assert!(
        me.body.contains("\"quantity\":2"),
        "the cart survived the upgrade: {}",
        me.body
    );
    assert_eq!(config_of(&dir, "appendonly"), "yes");
    assert!(stop(child).success());
    // And from now on the append-only file holds it.
    assert!(dir.join("appendonlydir").exists());
}
