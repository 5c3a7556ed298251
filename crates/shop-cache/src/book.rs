//! The book's own command sequences, kept only as baselines for the benchmarks: the
//! shop never calls them. Each does the same Redis work as its counterpart in
//! [`crate::session`], the way chapter 2 does it, so a benchmark can report the
//! shop's figure next to the book's in the same run.

use redis::aio::ConnectionManager;

use crate::CacheError;
use crate::clock::unix_now;
use crate::domain::{ItemId, UserId};
use crate::keys::Keys;
use crate::session::{HISTORY_LEN, SessionToken};

/// The book's `update_token`: one command per round trip, client clock.
pub async fn update_token(
    conn: &mut ConnectionManager,
    keys: &Keys,
    token: &SessionToken,
    user: UserId,
    item: Option<ItemId>,
) -> Result<(), CacheError> {
    let now = unix_now();
    redis::cmd("HSET")
        .arg(keys.login())
        .arg(token.expose())
        .arg(user)
        .exec_async(conn)
        .await?;
    redis::cmd("ZADD")
        .arg(keys.recent())
        .arg(now)
        .arg(token.expose())
        .exec_async(conn)
        .await?;
    if let Some(item) = item {
        let viewed = keys.viewed_by(token);
        redis::cmd("ZADD")
            .arg(&viewed)
            .arg(now)
            .arg(item)
            .exec_async(conn)
            .await?;
        redis::cmd("ZREMRANGEBYRANK")
            .arg(&viewed)
            .arg(0)
            .arg(-(HISTORY_LEN as i64) - 1)
            .exec_async(conn)
            .await?;
        redis::cmd("ZINCRBY")
            .arg(keys.item_views())
            .arg(-1)
            .arg(item)
            .exec_async(conn)
            .await?;
    }
    Ok(())
}

/// The same five commands as [`update_token`] sent as one pipeline (one round trip,
/// not atomic, client clock): the alternative to the shop's Lua script.
pub async fn update_token_pipelined(
    conn: &mut ConnectionManager,
    keys: &Keys,
    token: &SessionToken,
    user: UserId,
    item: Option<ItemId>,
) -> Result<(), CacheError> {
    let now = unix_now();
    let mut pipe = redis::pipe();
    pipe.hset(keys.login(), token.expose(), user)
        .ignore()
        .zadd(keys.recent(), token.expose(), now)
        .ignore();
    if let Some(item) = item {
        let viewed = keys.viewed_by(token);
        pipe.zadd(&viewed, item, now)
            .ignore()
            .zremrangebyrank(&viewed, 0, -(HISTORY_LEN as isize) - 1)
            .ignore()
            .zincr(keys.item_views(), item, -1)
            .ignore();
    }
    pipe.exec_async(conn).await?;
    Ok(())
}
