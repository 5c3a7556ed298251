//! A lock in Redis that expires on its own: one holder at a time for a key (a
//! page's render, a cart's checkout), taken with `SET NX PX` and let go only by
//! its holder, so a holder that died (or overran the lock's time) never releases
//! another's.
//!
//! A take or a release whose answer never came (Redis down, or a node stalled
//! past the request's budget) may still run later, when the node wakes: the lock
//! is then let go in the background as soon as Redis answers again, so a lock
//! nobody holds does not refuse its key for its whole time (a shopper could not
//! check out for half a minute after a stall).

use std::time::Duration;

use crate::domain::SessionToken;
use crate::{CacheError, RedisConn, scripts};

/// A held lock; pass it back to [`release`].
#[derive(Debug, Clone)]
pub struct Lock {
    key: String,
    holder: String,
    ttl: Duration,
}

/// How often a lock whose take or release went unanswered is let go again, until
/// Redis answers or the lock's time is up.
const RELEASE_RETRY: Duration = Duration::from_millis(100);

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
        ttl,
    };
    let taken: Result<Option<String>, _> = redis::cmd("SET")
        .arg(&lock.key)
        .arg(&lock.holder)
        .arg("NX")
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query_async(&mut conn.clone())
        .await;
    match taken {
        Ok(taken) => Ok(taken.map(|_| lock)),
        Err(error) => {
            release_later(conn, lock, ttl);
            Err(error.into())
        }
    }
}

/// Lets `lock` go, unless it expired meanwhile (and may be another's now). On an
/// error it goes on trying in the background (for the lock's time at most).
pub async fn release(conn: &RedisConn, lock: Lock) -> Result<(), CacheError> {
    let released = unlock(conn, &lock).await;
    if released.is_err() {
        let ttl = lock.ttl;
        release_later(conn, lock, ttl);
    }
    released
}

async fn unlock(conn: &RedisConn, lock: &Lock) -> Result<(), CacheError> {
    scripts::UNLOCK
        .key(&lock.key)
        .arg(&lock.holder)
        .invoke_async::<()>(&mut conn.clone())
        .await?;
    Ok(())
}

/// Lets `lock` go in a task of its own, trying every [`RELEASE_RETRY`] for `for_`
/// at most (after that it has expired anyway).
fn release_later(conn: &RedisConn, lock: Lock, for_: Duration) {
    let conn = conn.clone();
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let give_up = tokio::time::Instant::now() + for_;
        while unlock(&conn, &lock).await.is_err() {
            if tokio::time::Instant::now() + RELEASE_RETRY > give_up {
                return;
            }
            tokio::time::sleep(RELEASE_RETRY).await;
        }
    });
}
