//! Login attempt limits, per client address and per account name, counted in Redis.
//!
//! Each login attempt costs an argon2 verification (tens of milliseconds of CPU and
//! 19 MiB of memory), so unlimited attempts are both a password-guessing channel
//! and a denial-of-service lever. The counters live in Redis rather than in each
//! web server (tower_governor and the like count per process): the shop runs N
//! stateless web servers behind a load balancer, and a limit per process would let
//! an attacker spread attempts and get N times the allowance. The cost is one round
//! trip per attempt, nothing next to the hash it saves.
//!
//! Fixed windows (`INCR` + `PEXPIRE` in one script): a client can burst up to twice
//! a limit across a window boundary, which is fine for this purpose and costs one
//! key per address or name and window.
//!
//! - Per client address (and IPv6 /56 and /48): every attempt counts, refused ones
//!   too, so hammering keeps a client locked out. This is what bounds the password
//!   hashing one client can cause. A refused attempt counts in the narrowest block
//!   that refused it and not in the wider ones, so one /64 hammering cannot use
//!   up its /56's or /48's share for the other subscribers in them.
//! - Per account name: only failures count (an attempt is counted when it is let
//!   through and taken back when it logs in: [`LoginLimiter::succeeded`]), so a
//!   user's own logins never lock them out. A name at its limit is not shut: a
//!   browser that logged in to that account before (a device cookie the shop
//!   signed: [`Devices`]) goes through while its own failures on the name stay
//!   under the limit, and anyone else gets one try per slow-down interval
//!   (window / limit: 6 s by default, one slot per name shared by every client
//!   without a device cookie) instead of a minute's refusal. Before, 11 wrong
//!   tries a minute from anywhere kept an account's owner out, with the right
//!   password, for as long as they went on; now an attacker can only make the
//!   owner's new devices compete for the slow-down's tries, and still gets no
//!   more than about twice the limit of guesses a window.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::OnceCell;

use crate::domain::client::ClientAddress;
use crate::keys::Keys;
use crate::{CacheError, RedisConn, scripts};

/// The limits of login attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimits {
    /// Attempts one client address may make per window.
    pub per_address: u32,
    /// Failed attempts on one account name per window (from all addresses)
    /// before it slows down.
    pub per_name: u32,
    /// The window.
    pub window: Duration,
    /// How often a name at its limit lets one attempt through from a browser
    /// without its device cookie; `None`: window / per_name.
    pub slow_down: Option<Duration>,
}

impl Default for LoginLimits {
    fn default() -> Self {
        Self {
            per_address: 20,
            per_name: 10,
            window: Duration::from_secs(60),
            slow_down: None,
        }
    }
}

impl LoginLimits {
    /// The slow-down interval in force (at least a millisecond).
    pub fn slow_down(&self) -> Duration {
        self.slow_down
            .unwrap_or(self.window / self.per_name.max(1))
            .max(Duration::from_millis(1))
    }
}

/// What the limiter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Go ahead and check the password.
    Allowed,
    /// Too many attempts; try again after this long.
    Refused {
        /// Until the window that refused ends.
        retry_after: Duration,
    },
}

impl Attempt {
    /// A limit script's answer, `{allowed 1/0, milliseconds to wait}`.
    fn from_script(ok: i64, wait_ms: i64) -> Self {
        if ok == 1 {
            Attempt::Allowed
        } else {
            Attempt::Refused {
                retry_after: Duration::from_millis(wait_ms.max(1) as u64),
            }
        }
    }
}

/// Counts login attempts. Clone it freely.
#[derive(Clone)]
pub struct LoginLimiter {
    conn: RedisConn,
    keys: Keys,
    limits: LoginLimits,
    devices: Devices,
}

impl LoginLimiter {
    /// A limiter with `limits`, its counters under `keys`.
    pub fn new(conn: RedisConn, keys: Keys, limits: LoginLimits) -> Self {
        Self {
            devices: Devices::new(conn.clone(), keys.clone()),
            conn,
            keys,
            limits,
        }
    }

    /// The device cookies this limiter trusts.
    pub fn devices(&self) -> &Devices {
        &self.devices
    }

    /// The limits in force.
    pub fn limits(&self) -> LoginLimits {
        self.limits
    }

    /// Counts an attempt from `address` (none when unknown) on account `name`
    /// (compared case-insensitively) and says whether it may check its password.
    /// `device` is the client's device cookie, if it sent one: the right one for
    /// this name lets the attempt through a name at its limit. An allowed attempt
    /// must be settled: [`LoginLimiter::succeeded`] or [`LoginLimiter::failed`].
    pub async fn attempt(
        &self,
        address: Option<&ClientAddress>,
        name: &str,
        device: Option<&str>,
    ) -> Result<Attempt, CacheError> {
        // The address first: a refused client does not touch the name's count.
        // An IPv6 client counts in its /64, /56 and /48, each with its shares.
        if let Some(address) = address {
            let counters = address
                .blocks()
                .into_iter()
                .map(|block| {
                    (
                        self.keys.login_attempts("ip", &block.name),
                        self.limits.per_address.saturating_mul(block.shares),
                    )
                })
                .collect();
            let answer = count_all(&self.conn, counters, self.limits.window).await?;
            if answer != Attempt::Allowed {
                return Ok(answer);
            }
        }
        let name = normal(name);
        let known_device = match device {
            Some(cookie) => self.devices.recognises(cookie, &name).await?,
            None => false,
        };
        let (counter, slot) = self.keys.login_name_limit(&name);
        let (ok, wait_ms): (i64, i64) = scripts::LOGIN_NAME_GATE
            .key(counter)
            .key(slot)
            .key(self.keys.login_device_failures(&name, device.unwrap_or("")))
            .arg(self.limits.window.as_millis() as u64)
            .arg(self.limits.per_name)
            .arg(self.limits.slow_down().as_millis() as u64)
            .arg(if known_device { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(Attempt::from_script(ok, wait_ms))
    }

    /// An allowed attempt on `name` logged in: its count is taken back (only
    /// failures count against a name). Returns the device cookie's value for the
    /// browser, which lets it through this name's limit from now on.
    pub async fn succeeded(&self, name: &str) -> Result<String, CacheError> {
        let name = normal(name);
        self.settle(&name, true, None).await?;
        self.devices.issue(&name).await
    }

    /// An allowed attempt on `name` failed (wrong password, a sign-up for a
    /// taken name): it stays counted, and a name at its limit slows down. Made
    /// with this account's device cookie (`device`), it counts against the
    /// cookie too: at the limit, the cookie no longer lets its holder through.
    pub async fn failed(&self, name: &str, device: Option<&str>) -> Result<(), CacheError> {
        let name = normal(name);
        let device = match device {
            Some(cookie) if self.devices.recognises(cookie, &name).await? => Some(cookie),
            _ => None,
        };
        self.settle(&name, false, device).await
    }

    async fn settle(
        &self,
        name: &str,
        success: bool,
        device: Option<&str>,
    ) -> Result<(), CacheError> {
        let (counter, slot) = self.keys.login_name_limit(name);
        scripts::LOGIN_NAME_SETTLE
            .key(counter)
            .key(slot)
            .key(self.keys.login_device_failures(name, device.unwrap_or("")))
            .arg(if success { "1" } else { "0" })
            .arg(self.limits.per_name)
            .arg(self.limits.slow_down().as_millis() as u64)
            .arg(if device.is_some() { "1" } else { "0" })
            .arg(self.limits.window.as_millis() as u64)
            .invoke_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// An account name as the limits count it: trimmed, any case.
fn normal(name: &str) -> String {
    name.trim().to_lowercase()
}

/// How long a device cookie is trusted after the login that issued it.
pub const DEVICE_LIFETIME: Duration = Duration::from_secs(180 * 24 * 3600);

/// Device cookies: a browser's proof that it logged in to an account before,
/// `<issued unix time>.<HMAC-SHA256 of the name and that time, hex>`, signed with a
/// random key kept in Redis (made by the first server that needs it, `SET NX`, so
/// every web server signs and checks with the same one, and read once per
/// process). It names no account and carries no session: it only lets its
/// holder's login attempts through a name that failures slowed down, and only for
/// the name it was issued for, for [`DEVICE_LIFETIME`]. Losing the key (a flushed
/// Redis) only makes every browser a new device again.
#[derive(Clone)]
pub struct Devices {
    conn: RedisConn,
    keys: Keys,
    key: std::sync::Arc<OnceCell<Vec<u8>>>,
}

impl Devices {
    /// Device cookies signed with the key kept under `keys`.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self {
            conn,
            keys,
            key: Default::default(),
        }
    }

    /// The signing key: read once per process, and made (`make`) if there is
    /// none yet. Checking a cookie never makes one (a client's made-up cookie
    /// writes nothing); with no key, no cookie can be genuine.
    async fn key(&self, make: bool) -> Result<Option<&[u8]>, CacheError> {
        if let Some(key) = self.key.get() {
            return Ok(Some(key));
        }
        let mut conn = self.conn.clone();
        if make {
            let made = format!(
                "{}{}",
                crate::domain::SessionToken::generate().expose(),
                crate::domain::SessionToken::generate().expose()
            );
            let _: Option<String> = redis::cmd("SET")
                .arg(self.keys.device_key())
                .arg(&made)
                .arg("NX")
                .query_async(&mut conn)
                .await?;
        }
        let stored: Option<String> = redis::cmd("GET")
            .arg(self.keys.device_key())
            .query_async(&mut conn)
            .await?;
        Ok(match stored {
            // Another task may have set it meanwhile: the same value, from Redis.
            Some(key) => Some(self.key.get_or_init(|| async { key.into_bytes() }).await),
            None => None,
        })
    }

    fn mac(key: &[u8], name: &str, issued: u64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(b"shop device\n");
        mac.update(name.as_bytes());
        mac.update(b"\n");
        mac.update(issued.to_string().as_bytes());
        mac
    }

    /// A device cookie's value for a browser that just logged in as `name`.
    pub async fn issue(&self, name: &str) -> Result<String, CacheError> {
        let issued = crate::clock::unix_now() as u64;
        let Some(key) = self.key(true).await? else {
            // Deleted between the SET NX and the GET: made again next time.
            return Err(CacheError::Corrupt { what: "device-key" });
        };
        let tag = Self::mac(key, &normal(name), issued).finalize();
        Ok(format!("{issued}.{}", hex::encode(tag.into_bytes())))
    }

    /// Whether `cookie` is a device cookie this shop issued for `name`, within its
    /// lifetime. Anything malformed is simply no.
    pub async fn recognises(&self, cookie: &str, name: &str) -> Result<bool, CacheError> {
        let Some((issued, tag)) = cookie.split_once('.') else {
            return Ok(false);
        };
        let (Ok(issued), Ok(tag)) = (issued.parse::<u64>(), hex::decode(tag)) else {
            return Ok(false);
        };
        // One spelling per cookie (no `+`, leading zeros or upper-case hex): the
        // failures counted against a cookie are keyed on what the client sends.
        if cookie != format!("{issued}.{}", hex::encode(&tag)) {
            return Ok(false);
        }
        let now = crate::clock::unix_now() as u64;
        if issued > now + 60 || now - issued.min(now) > DEVICE_LIFETIME.as_secs() {
            return Ok(false);
        }
        let Some(key) = self.key(false).await? else {
            return Ok(false);
        };
        let mac = Self::mac(key, &normal(name), issued);
        // Compared in constant time.
        Ok(mac.verify_slice(&tag).is_ok())
    }
}

/// Counts one request on the fixed-window counter `key` (the same script for
/// every limit here) and says whether it is within `limit` per `window`.
async fn count(
    conn: &RedisConn,
    key: &str,
    limit: u32,
    window: Duration,
) -> Result<Attempt, CacheError> {
    let (ok, wait_ms): (i64, i64) = scripts::LOGIN_ATTEMPT
        .key(key)
        .arg(window.as_millis() as u64)
        .arg(limit)
        .invoke_async(&mut conn.clone())
        .await?;
    Ok(Attempt::from_script(ok, wait_ms))
}

/// Counts one request in `counters` (a key and its limit, the narrowest block
/// first), one call each (separate keys: separate slots in a cluster), and stops
/// at the first that refuses: a client refused in its own block counts nothing
/// in the wider ones, so one /64 hammering away cannot use up its /48's share
/// for the other /64s in it.
async fn count_all(
    conn: &RedisConn,
    counters: Vec<(String, u32)>,
    window: Duration,
) -> Result<Attempt, CacheError> {
    for (key, limit) in &counters {
        let answer = count(conn, key, *limit, window).await?;
        if answer != Attempt::Allowed {
            return Ok(answer);
        }
    }
    Ok(Attempt::Allowed)
}

/// A fixed-window limit on one kind of request per client address, counted in
/// every block the address is in (an IPv6 client's /64, and its /56 and /48 with
/// 4 and 16 times the share), in Redis like the login attempts, so every web
/// server shares the count. A refused request is counted too.
#[derive(Clone)]
pub struct AddressLimit(RateLimit);

impl AddressLimit {
    /// At most `per_address` requests of `scope` per client address per `window`.
    pub fn new(
        conn: RedisConn,
        keys: Keys,
        scope: &'static str,
        per_address: u32,
        window: Duration,
    ) -> Self {
        Self(RateLimit::new(conn, keys, scope, per_address, window))
    }

    /// Counts one request from `address` and says whether it may go ahead.
    pub async fn hit(&self, address: &ClientAddress) -> Result<Attempt, CacheError> {
        let limit = &self.0;
        let counters = address
            .blocks()
            .into_iter()
            .map(|block| {
                (
                    limit.keys.rate_limit(limit.scope, &block.name),
                    limit.limit.saturating_mul(block.shares),
                )
            })
            .collect();
        count_all(&limit.conn, counters, limit.window).await
    }
}

/// A fixed-window limit on one kind of request per client (the flash sale's buys
/// per account), counted in Redis like the login attempts (one script call, so
/// every web server shares the count) with the same script. A refused request is
/// counted too.
#[derive(Clone)]
pub struct RateLimit {
    conn: RedisConn,
    keys: Keys,
    scope: &'static str,
    limit: u32,
    window: Duration,
}

impl RateLimit {
    /// At most `limit` requests of `scope` per client per `window`.
    pub fn new(
        conn: RedisConn,
        keys: Keys,
        scope: &'static str,
        limit: u32,
        window: Duration,
    ) -> Self {
        Self {
            conn,
            keys,
            scope,
            limit,
            window,
        }
    }

    /// Counts one request of `who` and says whether it may go ahead.
    pub async fn hit(&self, who: &str) -> Result<Attempt, CacheError> {
        let key = self.keys.rate_limit(self.scope, who);
        count(&self.conn, &key, self.limit, self.window).await
    }
}
