//! Registered users and their passwords (argon2id hashes, never the password).
//!
//! Argon2 is expensive on purpose: each hash or verification takes tens of
//! milliseconds of CPU and, with the default parameters, 19 MiB of memory. Logins
//! are the one place anonymous clients can make the shop do that work, so it is
//! bounded three ways:
//! - at most [`HashingStats::limit`] hashes run at once in the whole process (one
//!   per core: more would only share the same CPUs while holding more memory), the
//!   rest wait their turn in a fair queue;
//! - their memory comes from a pool of that many reusable buffers, allocated once.
//!   Before, every verification allocated its own 19 MiB on whichever blocking thread
//!   ran it and the allocator kept it: 200 wrong-password logins, 20 at a time, grew
//!   the process from 25 MB to 2.3-2.9 GB, and it stayed there when idle;
//! - an unknown name is verified against a dummy hash made with the same
//!   parameters, so it costs what a wrong password costs and the answer time does
//!   not tell which names exist. (The dummy is made on the first such check after
//!   start, which therefore takes one hash longer, once per process.)
//!
//! Stored hashes are standard PHC strings (`$argon2id$v=19$m=19456,t=2,p=1$...`):
//! written as `Argon2::default()` writes them, and any argon2 PHC hash verifies.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use shop_domain::UserId;
use sqlx::Row;
use tokio::sync::{OnceCell, Semaphore};

use crate::{Db, DbError, unix_now};

/// The largest argon2 memory cost (KiB) a stored hash may ask for. New hashes use
/// 19 MiB; a stored hash asking for more than this is not one this code wrote, and
/// verifying it would grow every pooled buffer to match.
const MAX_M_COST_KIB: u32 = 256 * 1024;

/// The process-wide bound on password hashing. Process-wide rather than per [`Db`]
/// because what it protects (the cores and the memory) belongs to the process: two
/// `Db` handles must not get two allowances.
struct Hashing {
    /// One permit per hash allowed to run.
    permits: Semaphore,
    /// How many permits there are.
    limit: usize,
    /// Argon2 memory, reused: never more buffers than permits.
    buffers: Mutex<Vec<Vec<Block>>>,
    /// Buffers ever allocated (at most `limit`, unless a hash panicked mid-way).
    allocated: AtomicUsize,
    /// Hashes running now, and the most ever seen running at once.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// How password hashing is bounded and how busy it has been, for tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashingStats {
    /// Most hashes or verifications run at once (the number of cores).
    pub limit: usize,
    /// Permits free now.
    pub available: usize,
    /// Hashes running now.
    pub in_flight: usize,
    /// The most that ever ran at once in this process.
    pub max_in_flight: usize,
    /// Argon2 memory buffers allocated so far (each reused, never more than `limit`).
    pub buffers: usize,
}

/// The current state of the process's password hashing.
pub fn hashing_stats() -> HashingStats {
    let h = hashing();
    HashingStats {
        limit: h.limit,
        available: h.permits.available_permits(),
        in_flight: h.in_flight.load(Ordering::SeqCst),
        max_in_flight: h.max_in_flight.load(Ordering::SeqCst),
        buffers: h.allocated.load(Ordering::SeqCst),
    }
}

fn hashing() -> &'static Hashing {
    static HASHING: OnceLock<Hashing> = OnceLock::new();
    HASHING.get_or_init(|| {
        let limit = std::thread::available_parallelism().map_or(1, |n| n.get());
        Hashing {
            permits: Semaphore::new(limit),
            limit,
            buffers: Mutex::new(Vec::with_capacity(limit)),
            allocated: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    })
}

/// Counts a running hash while alive.
struct InFlight(&'static Hashing);

impl InFlight {
    fn start(h: &'static Hashing) -> Self {
        let now = h.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        h.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(h)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Hashing {
    /// Runs `job` on the blocking pool once a permit is free, lending it a memory
    /// buffer. The permit travels with the job: a caller that stops waiting does not
    /// free it before the hash is done.
    async fn run<T: Send + 'static>(
        &'static self,
        job: impl FnOnce(&mut Vec<Block>) -> T + Send + 'static,
    ) -> Result<T, DbError> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| DbError::Password(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _running = InFlight::start(self);
            let mut buffer = self.take_buffer();
            let out = job(&mut buffer);
            self.buffers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(buffer);
            out
        })
        .await
        .map_err(|e| DbError::Password(e.to_string()))
    }

    fn take_buffer(&self) -> Vec<Block> {
        let pooled = self.buffers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        pooled.unwrap_or_else(|| {
            self.allocated.fetch_add(1, Ordering::SeqCst);
            Vec::new()
        })
    }
}

/// Argon2 `memory` of at least `blocks` blocks (grown once, then reused as is).
fn memory_for(memory: &mut Vec<Block>, blocks: usize) -> &mut [Block] {
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    &mut memory[..blocks]
}

/// Hashes a password with argon2id (the default parameters) and a random salt, off
/// the async threads and within the process's hashing bound.
pub async fn hash_password(password: &str) -> Result<String, DbError> {
    let password = password.to_owned();
    hashing()
        .run(move |memory| hash_with(memory, password.as_bytes()))
        .await?
}

fn hash_with(memory: &mut Vec<Block>, password: &[u8]) -> Result<String, DbError> {
    let failed = |e: argon2::password_hash::Error| DbError::Password(e.to_string());
    // What `Argon2::default()` uses, spelled out to build its PHC string by hand.
    let (algorithm, version, params) =
        (Algorithm::default(), Version::default(), Params::default());
    let salt = SaltString::generate(&mut OsRng);
    let mut salt_bytes = [0u8; 64];
    let raw_salt = salt.as_salt().decode_b64(&mut salt_bytes).map_err(failed)?;
    let argon2 = Argon2::new(algorithm, version, params.clone());
    let memory = memory_for(memory, params.block_count());
    let output = Output::init_with(Params::DEFAULT_OUTPUT_LEN, |out| {
        Ok(argon2.hash_password_into_with_memory(password, raw_salt, out, &mut *memory)?)
    })
    .map_err(failed)?;
    let phc = PasswordHash {
        algorithm: algorithm.ident(),
        version: Some(version.into()),
        params: ParamsString::try_from(&params).map_err(failed)?,
        salt: Some(salt.as_salt()),
        hash: Some(output),
    };
    Ok(phc.to_string())
}

/// Whether `password` matches the PHC string `phc`, within the process's hashing
/// bound; `done` counts the verifications that ran. A hash this code cannot read is
/// [`DbError::Corrupt`].
async fn verify_password(
    password: &str,
    phc: String,
    done: Arc<AtomicU64>,
) -> Result<bool, DbError> {
    let password = password.to_owned();
    hashing()
        .run(move |memory| {
            let verified = verify_with(memory, password.as_bytes(), &phc);
            if verified.is_ok() {
                done.fetch_add(1, Ordering::Relaxed);
            }
            verified
        })
        .await?
}

fn verify_with(memory: &mut Vec<Block>, password: &[u8], phc: &str) -> Result<bool, DbError> {
    let corrupt = |_| DbError::Corrupt {
        what: "users.password_hash",
    };
    let parsed = PasswordHash::new(phc).map_err(corrupt)?;
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return Err(DbError::Corrupt {
            what: "users.password_hash",
        });
    };
    let algorithm = Algorithm::try_from(parsed.algorithm).map_err(corrupt)?;
    let version = parsed
        .version
        .map(Version::try_from)
        .transpose()
        .map_err(|_| DbError::Corrupt {
            what: "users.password_hash",
        })?
        .unwrap_or_default();
    let params = Params::try_from(&parsed).map_err(corrupt)?;
    if params.m_cost() > MAX_M_COST_KIB {
        return Err(DbError::Corrupt {
            what: "users.password_hash",
        });
    }
    let mut salt_bytes = [0u8; 64];
    let raw_salt = salt.decode_b64(&mut salt_bytes).map_err(corrupt)?;
    let argon2 = Argon2::new(algorithm, version, params.clone());
    let memory = memory_for(memory, params.block_count());
    let computed = Output::init_with(expected.len(), |out| {
        Ok(argon2.hash_password_into_with_memory(password, raw_salt, out, &mut *memory)?)
    })
    .map_err(|e| DbError::Password(e.to_string()))?;
    // `Output`'s equality is constant-time.
    Ok(computed == expected)
}

/// A hash of a random password no one knows, made once with the parameters of real
/// hashes: what an unknown name is checked against.
async fn dummy_hash() -> Result<&'static str, DbError> {
    static DUMMY: OnceCell<String> = OnceCell::const_new();
    let hash = DUMMY
        .get_or_try_init(|| async {
            let secret = SaltString::generate(&mut OsRng);
            hash_password(secret.as_str()).await
        })
        .await?;
    Ok(hash.as_str())
}

impl Db {
    /// Registers a user; `None` if the name is taken.
    pub async fn create_user(&self, name: &str, password: &str) -> Result<Option<UserId>, DbError> {
        let hash = hash_password(password).await?;
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "INSERT INTO users (name, password_hash, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING RETURNING id",
        )
        .bind(name)
        .bind(hash)
        .bind(unix_now())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.map(|r| user_id(r.try_get("id")?)).transpose()
    }

    /// Registers many users who share one password (hashed once, so a sale's ten
    /// thousand test buyers take a second, not ten thousand argon2 runs), in
    /// transactions of a thousand; names already taken are kept as they are.
    /// Returns every named user's id, in the order given.
    pub async fn create_users_sharing_password(
        &self,
        names: &[String],
        password: &str,
    ) -> Result<Vec<UserId>, DbError> {
        let hash = hash_password(password).await?;
        let now = unix_now();
        let mut ids = Vec::with_capacity(names.len());
        for chunk in names.chunks(1_000) {
            let mut tx = self.begin_write().await?;
            for name in chunk {
                sqlx::query(
                    "INSERT INTO users (name, password_hash, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(name)
                .bind(&hash)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                let id: i64 = sqlx::query("SELECT id FROM users WHERE name = $1")
                    .bind(name)
                    .fetch_one(&mut *tx)
                    .await?
                    .try_get("id")?;
                ids.push(user_id(id)?);
            }
            tx.commit().await?;
        }
        Ok(ids)
    }

    /// The user with this name and password, or `None` (unknown name or wrong
    /// password: callers must not say which). Both cost one argon2 verification,
    /// so neither can the time it takes.
    pub async fn check_password(
        &self,
        name: &str,
        password: &str,
    ) -> Result<Option<UserId>, DbError> {
        let row = sqlx::query("SELECT id, password_hash FROM users WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.read)
            .await?;
        let (user, hash) = match row {
            Some(row) => (
                Some(user_id(row.try_get("id")?)?),
                row.try_get::<String, _>("password_hash")?,
            ),
            None => (None, dummy_hash().await?.to_owned()),
        };
        let matches = verify_password(password, hash, self.password_checks.clone()).await?;
        Ok(user.filter(|_| matches))
    }

    /// Argon2 verifications `check_password` has run through this handle (and its
    /// clones): one per call, whether or not the name exists.
    pub fn password_checks(&self) -> u64 {
        self.password_checks.load(Ordering::Relaxed)
    }

    /// Makes the user named `name` an admin (the operations page); `false` if
    /// there is no such user.
    pub async fn grant_admin(&self, name: &str) -> Result<bool, DbError> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("UPDATE users SET is_admin = 1 WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether the user is an admin.
    pub async fn is_admin(&self, id: UserId) -> Result<bool, DbError> {
        Ok(
            sqlx::query("SELECT 1 AS yes FROM users WHERE id = $1 AND is_admin = 1")
                .bind(id.to_i64())
                .fetch_optional(&self.read)
                .await?
                .is_some(),
        )
    }

    /// Gives the user a new password (hashed on the same bounded pool as every
    /// other); `false` if there is no such user. Committed before it returns.
    pub async fn set_password(&self, id: UserId, password: &str) -> Result<bool, DbError> {
        let hash = hash_password(password).await?;
        let mut tx = self.begin_write().await?;
        let done = sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(hash)
            .bind(id.to_i64())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// The id of the user named `name`, if there is one.
    pub async fn user_named(&self, name: &str) -> Result<Option<UserId>, DbError> {
        let row = sqlx::query("SELECT id FROM users WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.read)
            .await?;
        row.map(|r| user_id(r.try_get("id")?)).transpose()
    }

    /// The user's name, for pages.
    pub async fn user_name(&self, id: UserId) -> Result<Option<String>, DbError> {
        let row = sqlx::query("SELECT name FROM users WHERE id = $1")
            .bind(id.to_i64())
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| r.try_get("name")).transpose()?)
    }
}

pub(crate) fn user_id(raw: i64) -> Result<UserId, DbError> {
    UserId::from_i64(raw).map_err(|_| DbError::Corrupt { what: "users.id" })
}
