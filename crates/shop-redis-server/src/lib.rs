//! Starting a private `redis-server`: listening on a Unix socket only (`--port 0`),
//! its files in one directory, and waiting until it answers `PING`. The one
//! launcher behind the shop's managed Redis (`shop serve` with no Redis to use,
//! which keeps its data) and the test kit's `TestRedis` (one throw-away server per
//! test), so the two cannot drift apart in how a server is started, when it counts
//! as ready, or what a missing binary says.
//!
//! Blocking on purpose: starting is a few milliseconds of waiting, once per process
//! or per test; an async caller runs it in `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The environment variable naming the `redis-server` binary (default: from `PATH`).
pub const BIN_ENV: &str = "SHOP_REDIS_SERVER";

/// How long a server may take to answer its first `PING`.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The `redis-server` to run: [`BIN_ENV`] if set, else the one on `PATH`.
pub fn server_bin() -> String {
    std::env::var(BIN_ENV).unwrap_or_else(|_| "redis-server".to_owned())
}

/// How to start one server.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The directory for its socket, log, pid file and (if it saves) its data.
    pub dir: PathBuf,
    /// The socket's file name in `dir`.
    pub socket_name: String,
    /// Redis's `save` setting: `""` saves nothing (tests), `"300 1 60 10000"` keeps
    /// the data of a long-lived server.
    pub save: String,
    /// More settings, as `redis-server` takes them on its command line (`name`,
    /// `value`), after the launcher's own (so they win): `appendonly yes`,
    /// `maxmemory 256mb`, ...
    pub settings: Vec<(String, String)>,
}

impl Launch {
    /// A server in `dir` listening on `dir/<socket_name>`, saving as `save` says.
    pub fn new(dir: &Path, socket_name: &str, save: &str) -> Self {
        Self {
            dir: dir.to_owned(),
            socket_name: socket_name.to_owned(),
            save: save.to_owned(),
            settings: Vec::new(),
        }
    }

    /// The same launch with one more setting (see [`Launch::settings`]).
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join(&self.socket_name)
    }

    /// Its log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The URL a Redis client connects with.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts the server (a stale socket file is removed first) and waits until it
    /// answers, at most [`START_TIMEOUT`] of not answering: a server loading its
    /// data set (`LOADING`: seconds a gigabyte) is waited for however long that
    /// takes. On failure the child is killed.
    pub fn start(&self) -> Result<Child, LaunchError> {
        self.start_within(START_TIMEOUT)
    }

    /// [`Launch::start`], giving up after `timeout` of not answering.
    fn start_within(&self, timeout: Duration) -> Result<Child, LaunchError> {
        let mut child = self.spawn()?;
        let mut deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(LaunchError::Exited {
                    status,
                    log: self.log(),
                });
            }
            match answer(&self.socket()) {
                Answer::Ready => return Ok(child),
                Answer::Loading => deadline = Instant::now() + timeout,
                Answer::None => {}
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LaunchError::Timeout { log: self.log() });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts the server (a stale socket file is removed first) without waiting
    /// for it to answer: [`Launch::start`] waits.
    pub fn spawn(&self) -> Result<Child, LaunchError> {
        let _ = std::fs::remove_file(self.socket());
        let bin = server_bin();
        Command::new(&bin)
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .args(["--unixsocketperm", "700", "--save", &self.save])
            .args(["--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--pidfile")
            .arg(self.dir.join("redis.pid"))
            .arg("--logfile")
            .arg(self.log_path())
            .args(
                self.settings
                    .iter()
                    .flat_map(|(name, value)| [format!("--{name}"), value.clone()]),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    LaunchError::NotInstalled { bin: bin.clone() }
                } else {
                    LaunchError::Spawn {
                        bin: bin.clone(),
                        source,
                    }
                }
            })
    }
}

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such binary.
    #[error(
        "`{bin}` is not installed. Install it (Debian/Ubuntu: `sudo apt-get install \
         redis-server`; macOS: `brew install redis`), point {BIN_ENV} at a redis-server \
         binary, or set REDIS_URL to a running Redis"
    )]
    NotInstalled {
        /// The binary looked for.
        bin: String,
    },
    /// The binary exists but could not be run.
    #[error("cannot start `{bin}`: {source}")]
    Spawn {
        /// The binary.
        bin: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited before answering.
    #[error("redis-server exited at start ({status}); its log:\n{log}")]
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// What it logged.
        log: String,
    },
    /// It did not answer in time.
    #[error("redis-server did not answer within {START_TIMEOUT:?}; its log:\n{log}")]
    Timeout {
        /// What it logged.
        log: String,
    },
}

/// Does a server answer `PING` on `socket` (within a second)?
pub fn ping(socket: &Path) -> bool {
    answer(socket) == Answer::Ready
}

/// How a server on a socket answers a `PING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `PONG`.
    Ready,
    /// `LOADING`: it runs, and serves once its data set is loaded.
    Loading,
    /// Nothing (no socket, no connection within a second, another error).
    None,
}

fn answer(socket: &Path) -> Answer {
    if !socket.exists() {
        return Answer::None;
    }
    let Ok(client) = redis::Client::open(format!("unix://{}", socket.display())) else {
        return Answer::None;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) else {
        return Answer::None;
    };
    match redis::cmd("PING").query::<String>(&mut conn) {
        Ok(_) => Answer::Ready,
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading) => {
            Answer::Loading
        }
        Err(_) => Answer::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("shop-launch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_started_server_answers_on_its_socket_and_stops_when_killed() {
        let dir = temp_dir("start");
        let launch = Launch::new(&dir, "r.sock", "");
        let mut child = launch.start().unwrap();
        assert!(ping(&launch.socket()));
        let mut conn = redis::Client::open(launch.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query(&mut conn)
            .unwrap();
        let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
        assert_eq!(v, "v");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!ping(&launch.socket()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A server loading a data set for longer than the start's time-out is
    /// waited for: it runs, and answers once loaded.
    #[test]
    fn a_server_loading_its_data_is_waited_for_past_the_time_out() {
        let dir = temp_dir("loading");
        let launch = Launch::new(&dir, "r.sock", "");
        let mut child = launch.start().unwrap();
        let mut conn = redis::Client::open(launch.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut fill = redis::pipe();
        for n in 0..20_000 {
            fill.set(format!("k{n}"), n).ignore();
        }
        let _: () = fill.query(&mut conn).unwrap();
        let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        // About two seconds of loading, against a second of time-out.
        let slow = launch
            .with("key-load-delay", "100")
            .with("loading-process-events-interval-bytes", "1024");
        let started = Instant::now();
        let mut child = slow.start_within(Duration::from_secs(1)).unwrap();
        assert!(started.elapsed() > Duration::from_secs(1), "it loaded");
        let mut conn = redis::Client::open(slow.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let n: u64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
        assert_eq!(n, 20_000);
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_server_that_cannot_start_says_why_with_its_log() {
        let dir = temp_dir("bad");
        // A save setting redis-server refuses: it exits at once.
        let launch = Launch::new(&dir, "r.sock", "not-a-number");
        let err = launch.start().unwrap_err();
        assert!(matches!(err, LaunchError::Exited { .. }), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
