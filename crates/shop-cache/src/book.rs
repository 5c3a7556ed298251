//! The book's own command sequences, kept only as baselines for the benchmarks: the
//! shop never calls them. Each does the same Redis work as its counterpart in
//! [`crate::session`], the way chapter 2 does it, so a benchmark can report the
//! shop's figure next to the book's in the same run.

use crate::RedisConn;

use crate::CacheError;
use crate::clock::unix_now;
use crate::domain::{ItemId, UserId};
use crate::keys::Keys;
use crate::session::{HISTORY_LEN, SessionToken};

/// The book's `update_token`: one command per round trip, client clock.
pub async fn update_token(
    conn: &mut RedisConn,
    keys: &Keys,
    token: &SessionToken,
    user: UserId,
    item: Option<ItemId>,
) -> Result<(), CacheError> {
    let now = unix_now();
    redis::cmd("HSET")
        .arg(keys.login_of(token))
        .arg(token.expose())
        .arg(user)
        .exec_async(conn)
        .await?;
    redis::cmd("ZADD")
        .arg(keys.recent_of(token))
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
    conn: &mut RedisConn,
    keys: &Keys,
    token: &SessionToken,
    user: UserId,
    item: Option<ItemId>,
) -> Result<(), CacheError> {
    let now = unix_now();
    let mut pipe = redis::pipe();
    pipe.hset(keys.login_of(token), token.expose(), user)
        .ignore()
        .zadd(keys.recent_of(token), token.expose(), now)
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

/// The book's `clean_sessions`, one round: ZCARD, then ZRANGE the oldest, then DEL
/// their `viewed:`/`cart:` keys, HDEL `login:`, ZREM `recent:`, one command per round
/// trip and not atomic (the defect the shop's cleaner fixes). Returns how many it removed.
pub async fn clean_sessions_once(
    conn: &mut RedisConn,
    keys: &Keys,
    cap: u64,
    batch: u64,
) -> Result<u64, CacheError> {
    // The book has one session index: the first (in its layout, only) shard.
    let shard = keys
        .shards()
        .next()
        .expect("a layout has at least one shard");
    let size: u64 = redis::cmd("ZCARD")
        .arg(keys.recent_in(shard))
        .query_async(conn)
        .await?;
    if size <= cap {
        return Ok(0);
    }
    let end = (size - cap).min(batch);
    let tokens: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys.recent_in(shard))
        .arg(0)
        .arg(end - 1)
        .query_async(conn)
        .await?;
    let mut session_keys = Vec::with_capacity(tokens.len() * 2);
    for token in &tokens {
        session_keys.push(keys.viewed_by_member(shard, token));
        session_keys.push(keys.cart_member(shard, token));
    }
    redis::cmd("DEL")
        .arg(&session_keys)
        .exec_async(conn)
        .await?;
    redis::cmd("HDEL")
        .arg(keys.login_in(shard))
        .arg(&tokens)
        .exec_async(conn)
        .await?;
    redis::cmd("ZREM")
        .arg(keys.recent_in(shard))
        .arg(&tokens)
        .exec_async(conn)
        .await?;
    Ok(tokens.len() as u64)
}

/// The book's `cache_rows`, one round: ZRANGE the first of `schedule:` WITH SCORES,
/// ZSCORE its delay, read the row, ZADD the next time, SET `inv:`; one command per
/// round trip, no claim (two workers can refresh the same row). Returns whether a
/// row was refreshed.
pub async fn cache_rows_once<S: crate::row_cache::RowSource>(
    conn: &mut RedisConn,
    keys: &Keys,
    source: &S,
) -> Result<bool, CacheError> {
    let next: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(keys.schedule())
        .arg(0)
        .arg(0)
        .arg("WITHSCORES")
        .query_async(conn)
        .await?;
    let now = unix_now();
    let Some((row, due)) = next.into_iter().next() else {
        return Ok(false);
    };
    if due > now {
        return Ok(false);
    }
    let row: ItemId = row
        .parse()
        .map_err(|_| CacheError::Corrupt { what: "schedule:" })?;
    let delay: Option<f64> = redis::cmd("ZSCORE")
        .arg(keys.delay())
        .arg(row)
        .query_async(conn)
        .await?;
    let delay = delay.unwrap_or(0.0);
    let json = source
        .load(row)
        .await
        .map_err(|_| CacheError::Corrupt { what: "row source" })?
        .unwrap_or_default();
    redis::cmd("ZADD")
        .arg(keys.schedule())
        .arg(now + delay)
        .arg(row)
        .exec_async(conn)
        .await?;
    redis::cmd("SET")
        .arg(keys.inventory(row))
        .arg(json)
        .exec_async(conn)
        .await?;
    Ok(true)
}
