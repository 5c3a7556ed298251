//! A lock in Redis that expires on its own: one holder at a time for a key (a
//! page's render, a cart's checkout), taken with `SET NX PX` and let go only by
//! its holder, so a holder that died (or overran the lock's time) never releases
//! another's.

use std::time::Duration;

use crate::domain::SessionToken;
use crate::{CacheError, RedisConn, scripts};

/// A held lock; pass it back to [`release`].
#[derive(Debug)]
pub struct Lock {
    key: String,
    holder: String,
}

/// Takes the lock `key` for `ttl` at most: `None` if another holds it now.
pub async fn take(
    conn: &RedisConn,
    key: String,
    ttl: Duration,
) -> Result<Option<Lock>, CacheError> {
    let lock = Lock {
        key,
        // Any unguessable value works; a session token is one.
        holder: SessionToken::generate().expose().to_owned(),
    };
    let taken: Option<String> = redis::cmd("SET")
        .arg(&lock.key)
        .arg(&lock.holder)
        .arg("NX")
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async(&mut conn.clone())
        .await?;
    Ok(taken.map(|_| lock))
}

/// Lets `lock` go, unless it expired meanwhile (and may be another's now).
pub async fn release(conn: &RedisConn, lock: Lock) -> Result<(), CacheError> {
    scripts::UNLOCK
        .key(&lock.key)
        .arg(&lock.holder)
        .invoke_async::<()>(&mut conn.clone())
        .await?;
    Ok(())
}
