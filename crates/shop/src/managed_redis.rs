//! The private `redis-server` that `shop serve` starts when no Redis is configured
//! and none answers on the default address: its data and socket under
//! `./data/redis`, listening on the socket only, stopped when the shop stops.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// How long the server may take to answer after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long it may take to save and exit when asked to.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running private Redis.
pub struct ManagedRedis {
    child: Child,
    dir: PathBuf,
}

impl ManagedRedis {
    /// Starts `redis-server` with its files in `dir` (created if missing) and waits
    /// until it answers. A missing binary is a plain-words error naming the fix.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", dir.display()))?;
        let socket = dir.join("redis.sock");
        let _ = std::fs::remove_file(&socket);
        let spawned = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args([
                "--unixsocketperm",
                "700",
                "--save",
                "300 1 60 10000",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .arg("--pidfile")
            .arg(dir.join("redis.pid"))
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "no Redis is configured and `redis-server` is not installed, so the shop \
                 cannot start its own. Install it (Debian/Ubuntu: `sudo apt-get install \
                 redis-server`; macOS: `brew install redis`) or set REDIS_URL to a running \
                 Redis, e.g. REDIS_URL=redis://127.0.0.1:6379."
            ),
            Err(e) => return Err(e).context("cannot start redis-server"),
        };
        let mut redis = Self { child, dir };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = redis.child.try_wait()? {
                bail!(
                    "redis-server exited at start ({status}); its log is {}",
                    redis.dir.join("redis.log").display()
                );
            }
            if ping(&redis.url()).await {
                return Ok(redis);
            }
            if Instant::now() > deadline {
                bail!("redis-server did not answer within {START_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The URL to connect to it.
    pub fn url(&self) -> String {
        format!("unix://{}", self.dir.join("redis.sock").display())
    }

    /// Asks it to save and exit, and waits; kills it if it does not.
    pub async fn stop(mut self) {
        if let Ok(client) = redis::Client::open(self.url())
            && let Ok(mut conn) = client.get_multiplexed_async_connection().await
        {
            // The server closes the connection as it exits: an error here is expected.
            let _: Result<(), _> = redis::cmd("SHUTDOWN")
                .arg("SAVE")
                .query_async(&mut conn)
                .await;
        }
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(_) => tracing::info!("private redis-server stopped"),
            Err(_) => {
                tracing::warn!("private redis-server did not stop; killing it");
                let _ = self.child.kill().await;
            }
        }
    }
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
