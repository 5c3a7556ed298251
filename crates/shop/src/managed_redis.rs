//! The private `redis-server`s that `shop serve` starts when no Redis is named
//! (never one that merely answers on the default port: it may be another
//! application's), one per [`Role`]: their data and
//! sockets under `./data/redis` and `./data/redis-cache`, listening on the socket
//! only, stopped when the shop stops.
//!
//! Two roles, so rebuildable data can never push out state. The state Redis
//! (sessions, carts, sales, limits, the ranking, the row cache) never evicts
//! (`noeviction`: at its limit, writes fail and are seen as errors, nothing is
//! silently dropped) and logs every write to an append-only file, fsynced every
//! second, so a restart of it keeps every cart, and a crash of the machine loses at
//! most a second of writes. The cache Redis (pages, their tombstones and render
//! locks; the tag indexes and purge marks stay in the state Redis, so an eviction
//! never makes a purge miss a page) has a memory limit and evicts the least recently used key (`allkeys-lru`), and
//! keeps nothing on disk: a page lost is a page rendered again. One Redis with
//! `volatile-lru` was the other way: it would evict any key with a TTL, and the
//! flash sale's answers and reservations and the login limits have TTLs.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::Context;
use shop_redis_server::{Launch, LaunchError};

/// Where the private state Redis keeps its files (under the working directory).
pub const STATE_DIR: &str = "data/redis";
/// Where the private cache Redis keeps its socket (it keeps no data).
pub const CACHE_DIR: &str = "data/redis-cache";
/// The socket's name in its directory.
const SOCKET: &str = "redis.sock";
/// The lock a running shop holds in the directory (see [`take_dir`]).
const LOCK: &str = "shop.lock";
/// How long a server left running by a killed shop may take to save and exit.
const LEFTOVER_STOP_TIMEOUT: Duration = Duration::from_secs(300);

/// How long it may take to save and exit when asked to.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a managed Redis holds, which decides how it is configured (see the module
/// docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sessions, carts, sales: never evicted, every write in the append-only file.
    State,
    /// Cached pages: at most this many megabytes, least recently used evicted.
    Cache {
        /// `maxmemory`, in megabytes.
        max_mb: u64,
    },
}

/// How long turning the append-only file on for an existing data set may take
/// (Redis writes the whole data set to it first).
const AOF_START_TIMEOUT: Duration = Duration::from_secs(300);

impl Role {
    /// The launch of a server of this role in `dir`. `aof` false starts the state
    /// Redis without its append-only file (see [`ManagedRedis::start`]).
    fn launch(self, dir: &Path, aof: bool) -> Launch {
        match self {
            Role::State => Launch::new(dir, SOCKET, "300 1 60 10000")
                .with("appendonly", if aof { "yes" } else { "no" })
                .with("appendfsync", "everysec")
                .with("maxmemory-policy", "noeviction"),
            Role::Cache { max_mb } => Launch::new(dir, SOCKET, "")
                .with("maxmemory", &format!("{max_mb}mb"))
                .with("maxmemory-policy", "allkeys-lru"),
        }
    }
}

/// A running private Redis, started by the launcher the test kit uses too
/// ([`shop_redis_server`]). Killed if dropped without [`ManagedRedis::stop`].
pub struct ManagedRedis {
    child: Child,
    launch: Launch,
    role: Role,
    /// The directory's lock, held while this lives (see [`take_dir`]).
    _lock: std::fs::File,
}

impl ManagedRedis {
    /// Starts `redis-server` in `role` with its files in `dir` (created if
    /// missing), and waits until it answers. A missing binary is a plain-words
    /// error naming the fix.
    pub async fn start(dir: &Path, role: Role) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        let lock = take_dir(&dir)?;
        stop_leftover(&dir, role).await?;
        // A data set kept by an older shop has a snapshot and no append-only file.
        // Started with `appendonly yes`, Redis would load the missing file (an
        // empty data set) instead of the snapshot, and overwrite the snapshot at
        // its next save: every session, cart and sale gone. So such a data set is
        // loaded from its snapshot first, then the file is turned on (Redis writes
        // the data set to it) before the shop uses it.
        // The manifest, not the directory: Redis makes the directory when the
        // rewrite starts and writes the manifest only once it succeeded, so a
        // rewrite cut short is started over from the snapshot.
        let upgrading = role == Role::State
            && dir.join("dump.rdb").exists()
            && !dir.join("appendonlydir/appendonly.aof.manifest").exists();
        let launch = role.launch(&dir, !upgrading);
        let starting = launch.clone();
        // Handed over in a guard: a start cancelled midway (a stop while the shop
        // starts) drops it and leaves no redis-server behind.
        let child = tokio::task::spawn_blocking(move || {
            starting.start().map(|child| Started::new(child, lock))
        })
        .await
        .context("the redis-server launcher panicked")?
        .map_err(|error| match error {
            LaunchError::NotInstalled { .. } => anyhow::anyhow!(
                "no Redis is configured and `redis-server` is not installed, so the \
                     shop cannot start its own. Install it (Debian/Ubuntu: `sudo apt-get \
                     install redis-server`; macOS: `brew install redis`) or set REDIS_URL \
                     to a running Redis, e.g. REDIS_URL=redis://127.0.0.1:6379."
            ),
            other => anyhow::Error::new(other),
        })?;
        let (child, lock) = child.hand_over();
        let managed = Self {
            child,
            launch,
            role,
            _lock: lock,
        };
        if upgrading {
            managed.turn_on_aof().await?;
        }
        Ok(managed)
    }

    /// `CONFIG SET appendonly yes`, then waits until Redis has written the data set
    /// to the new file.
    async fn turn_on_aof(&self) -> anyhow::Result<()> {
        tracing::info!("turning on the append-only file of the private redis-server");
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("yes")
            .exec_async(&mut conn)
            .await
            .context("cannot turn on the private redis-server's append-only file")?;
        let deadline = Instant::now() + AOF_START_TIMEOUT;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query_async(&mut conn)
                .await?;
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
                    .unwrap_or("")
                    .to_owned()
            };
            if field("aof_enabled") == "1"
                && field("aof_rewrite_in_progress") == "0"
                && field("aof_rewrite_scheduled") == "0"
            {
                // Enabled is reported before the first rewrite is done; only a
                // rewrite that succeeded leaves the data set in the file.
                anyhow::ensure!(
                    field("aof_last_bgrewrite_status") == "ok"
                        && self
                            .launch
                            .dir
                            .join("appendonlydir/appendonly.aof.manifest")
                            .exists(),
                    "the private redis-server could not write its append-only file; \
                     see {}",
                    self.launch.log_path().display()
                );
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the private redis-server did not finish writing its append-only file"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The URL to connect to it.
    pub fn url(&self) -> String {
        self.launch.url()
    }

    /// Asks it to exit (the state Redis saving first), and waits; kills it if it
    /// does not.
    pub async fn stop(mut self) {
        if let Err(error) = ask_to_stop(&self.url(), self.role).await {
            tracing::warn!(%error, "private redis-server refused to stop; killing it");
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                tracing::info!("private redis-server stopped");
                return;
            }
            if Instant::now() > deadline {
                tracing::warn!("private redis-server did not stop; killing it");
                return; // Drop kills it.
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Asks the Redis at `url` to exit, the state Redis saving first (the cache
/// keeps nothing: its pages are rebuilt on demand).
async fn ask_to_stop(url: &str, role: Role) -> Result<(), String> {
    if let Ok(client) = redis::Client::open(url)
        && let Ok(mut conn) = client.get_multiplexed_async_connection().await
    {
        let save = match role {
            Role::State => "SAVE",
            Role::Cache { .. } => "NOSAVE",
        };
        // The server closes the connection as it exits, or saves past the
        // client's wait: an error here is expected; an answer is a refusal
        // ("Errors trying to SHUTDOWN": its save failed).
        let said: Result<(), redis::RedisError> = redis::cmd("SHUTDOWN")
            .arg(save)
            .query_async(&mut conn)
            .await;
        if let Err(error) = said
            && !(error.is_io_error() || error.is_connection_dropped() || error.is_timeout())
        {
            return Err(error.to_string());
        }
    }
    Ok(())
}

/// Takes `dir` for this process: a lock on `shop.lock` there, held while the
/// process lives (the kernel lets go of it when the process ends, however it
/// ends). Held by another process: a running shop uses this directory, an error.
fn take_dir(dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join(LOCK);
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another `shop serve` runs with the private redis-server in {}: stop it \
             first, or start this one in another directory",
            dir.display()
        ),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(error).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// Makes way for this process's private Redis in `dir` (taken, see
/// [`take_dir`]) when a server still listens on its socket: one left running
/// by a shop that did not stop (killed, or out of memory). It is asked to stop,
/// saving first, and waited for until it is gone, so this shop's own starts on
/// the files it leaves: two servers writing one append-only file would
/// corrupt it.
async fn stop_leftover(dir: &Path, role: Role) -> anyhow::Result<()> {
    let socket = dir.join(SOCKET);
    if !listening(&socket).await {
        return Ok(());
    }
    let url = format!("unix://{}", socket.display());
    let pid = server_pid(&url).await;
    // An older shop, which takes no lock, may still run on it (an upgrade).
    if let Some(shop) = pid.and_then(live_shop_parent) {
        anyhow::bail!(
            "a `shop serve` (pid {shop}) runs with the private redis-server in {}: stop \
             it first, or start this one in another directory",
            dir.display()
        );
    }
    tracing::warn!(
        pid = pid.unwrap_or_default(),
        dir = %dir.display(),
        "a private redis-server was left running here by a shop that did not stop \
         (killed?): stopping it, and waiting while it saves, before this shop starts \
         its own"
    );
    let stop_it = || {
        format!(
            "stop it (`redis-cli -s {} shutdown`) and start again",
            socket.display()
        )
    };
    if let Err(error) = ask_to_stop(&url, role).await {
        anyhow::bail!(
            "the redis-server left running in {} refused to stop ({error}): {}",
            dir.display(),
            stop_it()
        );
    }
    // Gone when nothing listens on the socket: Redis closes it (and removes
    // it) once its files are written, as it exits; a large data set takes its
    // time to save, during which the socket still takes connections.
    let deadline = Instant::now() + LEFTOVER_STOP_TIMEOUT;
    while listening(&socket).await {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the redis-server left running in {} did not stop in {} s: {}",
            dir.display(),
            LEFTOVER_STOP_TIMEOUT.as_secs(),
            stop_it()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Whether a server listens on the Unix socket `socket`: a connection taken,
/// or one not answered within half a second (a server busy saving, its queue
/// full), says so; refused or no socket, not.
async fn listening(socket: &Path) -> bool {
    let connect = tokio::net::UnixStream::connect(socket);
    !matches!(
        tokio::time::timeout(Duration::from_millis(500), connect).await,
        Ok(Err(_))
    )
}

/// The pid of a running `shop` whose child process `pid` is (read from
/// `/proc`: a parent of this program's name), if any.
fn live_shop_parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: the name may hold spaces and parentheses.
    let ppid: u32 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let name = |of: &str| std::fs::read_to_string(format!("/proc/{of}/comm")).ok();
    (name(&ppid.to_string())? == name("self")?).then_some(ppid)
}

/// The process id a Redis says it has (`INFO server`).
async fn server_pid(url: &str) -> Option<u32> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// A `redis-server` just started, killed if dropped before it is handed over.
/// The directory's lock rides with it: released only once the server is
/// killed and reaped (or handed over), never while it may still run.
struct Started(Option<(Child, std::fs::File)>);

impl Started {
    fn new(child: Child, lock: std::fs::File) -> Self {
        Self(Some((child, lock)))
    }

    fn hand_over(mut self) -> (Child, std::fs::File) {
        self.0.take().expect("handed over once")
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some((mut child, _lock)) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ManagedRedis {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The URL of the private Redis with its files in `dir` (relative to the working
/// directory), if one answers there: what the other commands use when no Redis
/// is named, so they reach the shop a `shop serve` in the same directory runs.
pub async fn running(dir: &str) -> Option<String> {
    let socket = Path::new(dir).canonicalize().ok()?.join(SOCKET);
    let url = format!("unix://{}", socket.display());
    ping(&url).await.then_some(url)
}

/// Does a Redis answer at `url` (within a second)?
pub async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), attempt).await,
        Ok(Some(_))
    )
}
