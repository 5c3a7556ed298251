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
//! key per address or name and window. Refused attempts are counted too, so
//! hammering keeps a client locked out. The account-name limit lets an attacker
//! lock a known account out for a window: that is the usual trade, kept mild by
//! counting per name only what is a guessing rate, not a lifetime total.

use std::time::Duration;

use crate::keys::Keys;
use crate::{CacheError, RedisConn, scripts};

/// The limits of login attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimits {
    /// Attempts one client address may make per window.
    pub per_address: u32,
    /// Attempts against one account name per window (from all addresses).
    pub per_name: u32,
    /// The window.
    pub window: Duration,
}

impl Default for LoginLimits {
    fn default() -> Self {
        Self {
            per_address: 20,
            per_name: 10,
            window: Duration::from_secs(60),
        }
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

/// Counts login attempts. Clone it freely.
#[derive(Clone)]
pub struct LoginLimiter {
    conn: RedisConn,
    keys: Keys,
    limits: LoginLimits,
}

impl LoginLimiter {
    /// A limiter with `limits`, its counters under `keys`.
    pub fn new(conn: RedisConn, keys: Keys, limits: LoginLimits) -> Self {
        Self { conn, keys, limits }
    }

    /// The limits in force.
    pub fn limits(&self) -> LoginLimits {
        self.limits
    }

    /// Counts an attempt from `address` (none when unknown) on account `name`
    /// (compared case-insensitively) and says whether it may go ahead.
    pub async fn attempt(&self, address: Option<&str>, name: &str) -> Result<Attempt, CacheError> {
        // One call per counter: they are separate keys (separate slots in a cluster).
        let name = self
            .keys
            .login_attempts("name", &name.trim().to_lowercase());
        let mut counters = vec![(name, self.limits.per_name)];
        if let Some(address) = address {
            counters.push((
                self.keys.login_attempts("ip", address),
                self.limits.per_address,
            ));
            for (block, times) in wider_blocks(address) {
                counters.push((
                    self.keys.login_attempts("ip", &block),
                    self.limits.per_address.saturating_mul(times),
                ));
            }
        }
        let calls = counters
            .iter()
            .map(|(key, limit)| count(&self.conn, key, *limit, self.limits.window));
        let answers = futures::future::try_join_all(calls).await?;
        // Refused if any counter refuses, for as long as the longest refusal.
        Ok(answers
            .into_iter()
            .max_by_key(|a| match a {
                Attempt::Allowed => Duration::ZERO,
                Attempt::Refused { retry_after } => *retry_after,
            })
            .unwrap_or(Attempt::Allowed))
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
    Ok(if ok == 1 {
        Attempt::Allowed
    } else {
        Attempt::Refused {
            retry_after: Duration::from_millis(wait_ms.max(1) as u64),
        }
    })
}

/// The wider blocks an IPv6 /64 (as the web tier names it: `2001:db8:1:2::/64`)
/// is counted in as well, each with its multiple of the per-address limit: its
/// /56 (a household's usual allocation: 4x) and its /48 (a site's: 16x). Without
/// them, one /48 had 65,536 times the allowance of one /64. Nothing for an IPv4
/// address.
pub fn wider_blocks(address: &str) -> Vec<(String, u32)> {
    let Some(prefix) = address.strip_suffix("::/64") else {
        return Vec::new();
    };
    let parts: Vec<u16> = prefix
        .split(':')
        .filter_map(|p| u16::from_str_radix(p, 16).ok())
        .collect();
    let [a, b, c, d] = parts[..] else {
        return Vec::new();
    };
    vec![
        (format!("{a:x}:{b:x}:{c:x}:{:x}::/56", d & 0xff00), 4),
        (format!("{a:x}:{b:x}:{c:x}::/48"), 16),
    ]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_block_counts_in_its_56_and_48_too() {
        assert_eq!(
            wider_blocks("2001:db8:1:2a3::/64"),
            vec![
                ("2001:db8:1:200::/56".to_owned(), 4),
                ("2001:db8:1::/48".to_owned(), 16)
            ]
        );
        assert!(wider_blocks("203.0.113.7").is_empty());
        assert!(
            wider_blocks("2001:db8::/64").is_empty(),
            "not the web tier's form"
        );
    }
}
