//! A private `redis-server` process per test (after redis-rs's `RedisServer`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The environment variable naming the `redis-server` binary (default: from `PATH`).
pub const BIN_ENV: &str = "SHOP_REDIS_SERVER";

/// How long a server may take to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` child process owned by one test.
///
/// It listens on `<tempdir>/r.sock` only (`--port 0`), saves nothing (`--save ""`,
/// no AOF) and logs to `<tempdir>/redis.log`, which is printed if the test panics.
/// Dropping it kills the process and removes the directory.
pub struct TestRedis {
    child: Option<Child>,
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
        let mut server = Self { child: None, dir };
        server.spawn();
        server
    }

    /// The URL to give a Redis client: `unix://<tempdir>/r.sock`.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("r.sock")
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

    /// Kills the server (as a crash would): clients see errors from now on.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts a new, empty server on the same socket (after [`TestRedis::kill`]), to
    /// test that clients reconnect when Redis comes back.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) {
        let bin = server_bin();
        let child = Command::new(&bin)
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{}", cannot_run(&bin, &e)));
        self.child = Some(child);
        self.wait_until_ready();
    }

    fn wait_until_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "redis-server exited at start ({status}); log:\n{}",
                    self.log()
                );
            }
            if ping(&self.socket()) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "redis-server did not answer within {START_TIMEOUT:?}; log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The `redis-server` to run: [`BIN_ENV`] if set, else the one on `PATH`.
pub(crate) fn server_bin() -> String {
    std::env::var(BIN_ENV).unwrap_or_else(|_| "redis-server".to_owned())
}

/// Why a Redis binary could not be started, and how to get one.
pub(crate) fn cannot_run(bin: &str, e: &std::io::Error) -> String {
    format!(
        "cannot start `{bin}`: {e}. Install it (Debian: `apt-get install redis-server`, \
         which also has redis-cli) or point {BIN_ENV} at a redis-server binary."
    )
}

fn ping(socket: &Path) -> bool {
    if !socket.exists() {
        return false;
    }
    let Ok(client) = redis::Client::open(format!("unix://{}", socket.display())) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut conn).is_ok()
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
