//! A private `redis-server` process per test (after redis-rs's `RedisServer`),
//! started by the same launcher as the shop's managed Redis
//! ([`shop_redis_server::Launch`]).

use std::path::PathBuf;
use std::process::Child;

use shop_redis_server::Launch;
use tempfile::TempDir;

/// The environment variable naming the `redis-server` binary (default: from `PATH`).
pub use shop_redis_server::BIN_ENV;

/// A `redis-server` child process owned by one test.
///
/// It listens on `<tempdir>/r.sock` only (`--port 0`), saves nothing (`--save ""`,
/// no AOF) and logs to `<tempdir>/redis.log`, which is printed if the test panics.
/// Dropping it kills the process and removes the directory.
pub struct TestRedis {
    child: Option<Child>,
    launch: Launch,
    dir: TempDir,
}

impl TestRedis {
    /// Starts a server and waits until it answers. Panics with the reason (missing
    /// binary, startup failure and its log) if it cannot: a test cannot go on.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("shop-redis-")
            .tempdir()
            .expect("create a temporary directory for redis-server");
        let launch = Launch::new(dir.path(), "r.sock", "");
        let mut server = Self {
            child: None,
            launch,
            dir,
        };
        server.spawn();
        server
    }

    /// The URL to give a Redis client: `unix://<tempdir>/r.sock`.
    pub fn url(&self) -> String {
        self.launch.url()
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.launch.socket()
    }

    /// A client for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid unix socket URL")
    }

    /// A plain connection for a test's own reads and writes (checking what the code
    /// under test stored), separate from the connection the code under test uses.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis-server")
    }

    /// Every key in the server, sorted.
    pub async fn all_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut self.conn().await)
            .await
            .expect("KEYS on the test redis-server");
        keys.sort();
        keys
    }

    /// Kills the server (as a crash would): clients see errors from now on.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Stops the server with SIGSTOP, as a fork stall, a slow command or a noisy
    /// neighbour would: its connections stay open and nothing answers.
    pub fn pause(&self) {
        signal(self.child.as_ref(), "-STOP");
    }

    /// Lets a [`TestRedis::pause`]d server go on (SIGCONT).
    pub fn resume(&self) {
        signal(self.child.as_ref(), "-CONT");
    }

    /// Starts a new, empty server on the same socket (after [`TestRedis::kill`]), to
    /// test that clients reconnect when Redis comes back.
    pub fn restart(&mut self) {
        self.kill();
        // Empty even after a [`TestRedis::reload_slowly`] saved its data.
        let _ = std::fs::remove_file(self.dir.path().join("dump.rdb"));
        self.spawn();
    }

    /// Saves the data set, then starts the server again on it, loading it
    /// slowly (`per_key` a key) and answering clients meanwhile, `LOADING` to
    /// every command, as a Redis restarted on gigabytes of data does for
    /// seconds. Returns once it listens, before the load is done.
    pub fn reload_slowly(&mut self, per_key: std::time::Duration) {
        let mut conn = self
            .client()
            .get_connection()
            .expect("connect to the test redis-server");
        let _: () = redis::cmd("SAVE")
            .query(&mut conn)
            .expect("SAVE on the test redis-server");
        drop(conn);
        self.kill();
        let delay = per_key.as_micros().to_string();
        let settings = &mut self.launch.settings;
        settings.push(("key-load-delay".to_owned(), delay));
        settings.push((
            "loading-process-events-interval-bytes".to_owned(),
            "1024".to_owned(),
        ));
        // Not `start`, which waits for a `PING` to answer: after the load.
        match self.launch.spawn() {
            Ok(child) => self.child = Some(child),
            Err(error) => panic!("{error}"),
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server never listened; its log:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        self.launch.log()
    }

    fn spawn(&mut self) {
        match self.launch.start() {
            Ok(child) => self.child = Some(child),
            Err(error) => panic!("{error}"),
        }
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to `child`, if it runs.
pub(crate) fn signal(child: Option<&Child>, signal: &str) {
    if let Some(child) = child {
        let sent = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill {signal} {}", child.id());
    }
}

/// Why a Redis binary could not be started, and how to get one.
pub(crate) fn cannot_run(bin: &str, e: &std::io::Error) -> String {
    format!(
        "cannot start `{bin}`: {e}. Install it (Debian: `apt-get install redis-server`, \
         which also has redis-cli) or point {BIN_ENV} at a redis-server binary."
    )
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- redis-server log ({}) ----\n{}",
                self.dir.path().display(),
                self.log()
            );
        }
        self.kill();
    }
}
