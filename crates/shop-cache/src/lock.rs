//! A lock in Redis that expires on its own: one holder at a time for a key (a
//! page's render, a cart's checkout), taken with `SET NX PX` and let go only by
//! its holder, so a holder that died (or overran the lock's time) never releases
//! another's.
//!
//! A take or a release whose answer never came (Redis down, or a node stalled
//! past the request's budget) may still run later, when the node wakes. A lock
//! whose take went unanswered is given up in the background as soon as Redis
//! answers: marked abandoned for its holder (so a take that runs later still is
//! refused) and let go if the take ran already, so a lock nobody holds does not
//! refuse its key for its whole time (a shopper could not check out for half a
//! minute after a stall). A release that failed is tried again the same way.
//!
//! An answer that comes when a stalled node wakes may come from a primary that
//! was replaced meanwhile (a failover): it runs the release, answers, then
//! becomes the new primary's replica and loses it, so the lock stays held on
//! the new primary. So a lock given back in the background is given back again
//! every [`SETTLE_STEP`] for [`SETTLE`] after the first answer (both scripts act
//! only on their own holder's value, so running one again changes nothing
//! else).

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

/// How long after the first answer a lock given back in the background is
/// given back again: longer than a woken, replaced primary takes to learn it is
/// a replica now (and commands to go to the new primary).
pub const SETTLE: Duration = Duration::from_secs(4);

/// How often it is given back again meanwhile.
pub const SETTLE_STEP: Duration = Duration::from_millis(500);

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
    let taken: Result<Option<String>, _> = scripts::TAKE_LOCK
        .key(&lock.key)
        .key(abandoned(&lock))
        .arg(&lock.holder)
        .arg(ttl.as_millis() as u64)
        .invoke_async(&mut conn.clone())
        .await;
    match taken {
        Ok(taken) => Ok(taken.map(|_| lock)),
        Err(error) => {
            let error = CacheError::from(error);
            // Failing fast: it was never sent, so nothing can take it later.
            if !error.is_failing_fast() {
                in_background(conn, lock, Undo::Abandon);
            }
            Err(error)
        }
    }
}

/// The key that marks `lock` abandoned by its holder: named after the lock (so
/// in its namespace) and in its slot (the lock's own hash tag, or, for a lock
/// without one, the lock's whole name as the mark's tag).
fn abandoned(lock: &Lock) -> String {
    let tagged = lock
        .key
        .find('{')
        .is_some_and(|open| lock.key[open..].contains('}'));
    if tagged {
        format!("{}:abandoned:{}", lock.key, lock.holder)
    } else {
        format!("{0}:abandoned:{1}{{{0}}}", lock.key, lock.holder)
    }
}

/// Lets `lock` go, unless it expired meanwhile (and may be another's now). On an
/// error it goes on trying in the background (for the lock's time at most).
pub async fn release(conn: &RedisConn, lock: Lock) -> Result<(), CacheError> {
    let released = undo(conn, &lock, Undo::Release).await;
    if released.is_err() {
        in_background(conn, lock, Undo::Release);
    }
    released
}

/// How a lock is given back.
#[derive(Debug, Clone, Copy)]
enum Undo {
    /// Its holder lets it go.
    Release,
    /// Its take went unanswered: mark it abandoned, and let it go if it ran.
    Abandon,
}

async fn undo(conn: &RedisConn, lock: &Lock, how: Undo) -> Result<(), CacheError> {
    let mut conn = conn.clone();
    match how {
        Undo::Release => {
            scripts::UNLOCK
                .key(&lock.key)
                .arg(&lock.holder)
                .invoke_async::<()>(&mut conn)
                .await?
        }
        Undo::Abandon => {
            scripts::ABANDON_LOCK
                .key(&lock.key)
                .key(abandoned(lock))
                .arg(&lock.holder)
                .arg(lock.ttl.as_millis() as u64)
                .invoke_async::<()>(&mut conn)
                .await?
        }
    }
    Ok(())
}

/// Gives `lock` back (`how`) in a task of its own, trying every
/// [`RELEASE_RETRY`] until Redis answers or the lock's time is up (it has
/// expired then anyway), then again every [`SETTLE_STEP`] for [`SETTLE`] (the
/// first answer may have come from a primary a failover replaced).
fn in_background(conn: &RedisConn, lock: Lock, how: Undo) {
    let conn = conn.clone();
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let give_up = tokio::time::Instant::now() + lock.ttl;
        if !until_answered(&conn, &lock, how, give_up).await {
            return;
        }
        let settled = (tokio::time::Instant::now() + SETTLE).min(give_up);
        while tokio::time::Instant::now() + SETTLE_STEP <= settled {
            tokio::time::sleep(SETTLE_STEP).await;
            if !until_answered(&conn, &lock, how, settled).await {
                return;
            }
        }
    });
}

/// Gives `lock` back (`how`) every [`RELEASE_RETRY`] until Redis answers
/// (`true`) or `give_up` comes (`false`).
async fn until_answered(
    conn: &RedisConn,
    lock: &Lock,
    how: Undo,
    give_up: tokio::time::Instant,
) -> bool {
    while undo(conn, lock, how).await.is_err() {
        if tokio::time::Instant::now() + RELEASE_RETRY > give_up {
            return false;
        }
        tokio::time::sleep(RELEASE_RETRY).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::nodes::slot_of;

    #[test]
    fn the_abandoned_mark_is_in_the_locks_slot() {
        for key in [
            "user-checkout:{u5}",
            "lock:cache:{p3}/items/1",
            "checkout:abc",
            "lock",
        ] {
            let lock = Lock {
                key: key.to_owned(),
                holder: "h".to_owned(),
                ttl: Duration::from_secs(1),
            };
            let mark = abandoned(&lock);
            assert_ne!(mark, lock.key);
            assert!(mark.starts_with(key), "{mark}");
            assert_eq!(
                slot_of(mark.as_bytes()),
                slot_of(key.as_bytes()),
                "{key} {mark}"
            );
        }
    }
}
