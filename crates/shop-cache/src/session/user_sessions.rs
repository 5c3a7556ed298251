//! Each user's index of their sessions (`user-sessions:<user>`, a hash: session id
//! -> the session's token, when it logged in, and its device), behind the devices
//! page, "log out everywhere", a password change ending the other sessions, and
//! the cap of sessions per user.
//!
//! Kept exact by every path of the shop that starts or ends a logged-in session,
//! on both layouts. On a cluster the index is under the user's tag (`{u<id>}`) and
//! a session's keys under its shard's (`{s<n>}`): two slots, so two writes, in an
//! order chosen so that the index may list a session that has ended but never
//! misses one that lives (a "log out everywhere" that missed a stolen session
//! would be the failure that matters):
//! - **login and sign-up** (a token rotation): the new token's entry is written
//!   first, then the session is moved to it (`login.lua`, which answers who the
//!   old token was logged in as); then the old token's entry goes, and the user's
//!   cap is applied;
//! - **logout, the cleaner, an expired token at the touch, ending a session from
//!   the devices page**: the session is removed first (a script in its shard that
//!   answers who it was logged in as), then its entry.
//!
//! A crash between the two writes leaves an entry whose token is no session of
//! that user: listing the sessions ([`Sessions::sessions_of`], which the devices
//! page, "log out everywhere" and the cap all go through) finds it (the token's
//! `login:` entry is not that user), drops it and does not show it. An entry
//! younger than [`IN_FLIGHT`] is a login in progress, not a leftover: it is left
//! alone (and not listed) until its session exists or it is old enough to drop.
//! Sessions the book's own `update_token` logs in are not indexed (the book has no
//! such index); everything the shop does is. Every indexed session has a login
//! time in `logins:` (which the book's logins lack), which is how the cleaner
//! knows which of the sessions it removes to take out of an index.

use sha2::{Digest, Sha256};

use super::{SessionToken, Sessions};
use crate::domain::UserId;
use crate::keys::Keys;
use crate::{CacheError, RedisConn, scripts};

/// The default most sessions one user may have: a new login beyond it ends their
/// least recently seen session.
pub const DEFAULT_MAX_PER_USER: u32 = 20;

/// Seconds an index entry may exist before its session does: a login writes the
/// entry, then the session, a few milliseconds apart. An entry older than this
/// whose token is no session of its user is a leftover, dropped when found.
pub const IN_FLIGHT: f64 = 60.0;

/// The longest User-Agent kept (in characters): enough for any real browser's.
const MAX_AGENT: usize = 256;

/// Where a session was started from, as the devices page shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Device {
    /// The browser's `User-Agent` (trimmed to 256 characters).
    pub user_agent: String,
    /// The client's network, not its address: an IPv4 /24 or an IPv6 /48.
    pub network: String,
}

/// One live session of a user.
#[derive(Debug, Clone, PartialEq)]
pub struct UserSession {
    /// An opaque id (not the token, from which it cannot be turned back).
    pub id: String,
    /// When it logged in (unix seconds).
    pub created: f64,
    /// When it was last seen (unix seconds).
    pub last_seen: f64,
    /// Where it logged in from.
    pub device: Device,
    token: SessionToken,
}

impl UserSession {
    /// Whether this is the session of `token`.
    pub fn is(&self, token: &SessionToken) -> bool {
        &self.token == token
    }
}

/// A session's id in its user's index and on the devices page: a hash of the
/// token, so the page can name a session without showing the token that would
/// let anyone who reads it take the session over.
pub fn session_id(token: &SessionToken) -> String {
    let digest = Sha256::new()
        .chain_update(b"shop session id\n")
        .chain_update(token.expose().as_bytes())
        .finalize();
    hex::encode(&digest[..12])
}

/// An index entry: `token \t created \t network \t user agent` (tabs and line
/// breaks taken out of what the client sent).
fn entry(token: &SessionToken, created: f64, device: &Device) -> String {
    let clean = |s: &str, most: usize| -> String {
        s.chars().filter(|c| !c.is_control()).take(most).collect()
    };
    format!(
        "{}\t{created:.3}\t{}\t{}",
        token.expose(),
        clean(&device.network, 64),
        clean(&device.user_agent, MAX_AGENT)
    )
}

fn parse_entry(id: String, raw: &str) -> Option<UserSession> {
    let mut parts = raw.splitn(4, '\t');
    let token = parts.next()?.parse().ok()?;
    let created = parts.next()?.parse().ok()?;
    let network = parts.next()?.to_owned();
    let user_agent = parts.next()?.to_owned();
    Some(UserSession {
        id,
        created,
        last_seen: 0.0,
        device: Device {
            user_agent,
            network,
        },
        token,
    })
}

/// Takes ended sessions out of their users' indexes: `(token, user)` pairs, one
/// `HDEL` each, sent together (a pipeline; split per slot on a cluster).
pub(crate) async fn unindex(
    conn: &RedisConn,
    keys: &Keys,
    ended: &[(SessionToken, UserId)],
) -> Result<(), CacheError> {
    if ended.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for (token, user) in ended {
        pipe.hdel(keys.user_sessions(*user), session_id(token))
            .ignore();
    }
    pipe.exec_async(&mut conn.clone()).await?;
    Ok(())
}

impl Sessions {
    /// The same sessions keeping at most `most` per user (a new login ends the
    /// user's least recently seen session beyond it); 0: no cap.
    pub fn with_max_per_user(mut self, most: u32) -> Self {
        self.max_per_user = most;
        self
    }

    /// Lists `token` as `user`'s, before its session exists (see the module docs).
    /// Returns how many entries the user's index holds now (live or not), which
    /// decides whether the login must look at the cap.
    pub(super) async fn index(
        &self,
        user: UserId,
        token: &SessionToken,
        device: &Device,
    ) -> Result<usize, CacheError> {
        Ok(scripts::INDEX_SESSION
            .key(self.keys.user_sessions(user))
            .arg(session_id(token))
            .arg(entry(token, crate::clock::unix_now(), device))
            .invoke_async(&mut self.conn.clone())
            .await?)
    }

    /// Lists in their users' indexes the logged-in sessions that are not listed:
    /// those of before the index (an upgrade: `shop migrate`, run once every web
    /// server runs a build that keeps the index). Their device is unknown and
    /// their login time the one in `logins:` (else now). Returns how many it
    /// listed. Safe while the shop runs: an entry for a session that ends
    /// meanwhile is a leftover, dropped at the next listing.
    pub async fn index_logins(&self) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let mut listed = 0;
        for shard in self.keys.shards() {
            let mut cursor = 0u64;
            loop {
                let (next, page) = super::logins_page(&mut conn, &self.keys, shard, cursor).await?;
                if !page.is_empty() {
                    let mut since = redis::cmd("ZMSCORE");
                    since.arg(self.keys.logins_in(shard));
                    for (token, _) in &page {
                        since.arg(token.expose());
                    }
                    let since: Vec<Option<f64>> = since.query_async(&mut conn).await?;
                    let now = crate::clock::unix_now();
                    let mut pipe = redis::pipe();
                    for ((token, user), since) in page.iter().zip(since) {
                        pipe.hset_nx(
                            self.keys.user_sessions(*user),
                            session_id(token),
                            entry(token, since.unwrap_or(now), &Device::default()),
                        );
                        if since.is_none() {
                            // Every listed session has a login time, as the touch
                            // gives one (the cleaner unlists only those).
                            pipe.cmd("ZADD")
                                .arg(self.keys.logins_in(shard))
                                .arg("NX")
                                .arg(now)
                                .arg(token.expose())
                                .ignore();
                        }
                    }
                    let added: Vec<u64> = pipe.query_async(&mut conn).await?;
                    listed += added.iter().sum::<u64>();
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(listed)
    }

    /// How many times the user's password has changed (0 before the first).
    pub async fn password_epoch(&self, user: UserId) -> Result<u64, CacheError> {
        let epoch: Option<u64> = redis::cmd("GET")
            .arg(self.keys.password_epoch(user))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(epoch.unwrap_or(0))
    }

    /// Records a change of the user's password (after it committed, before the
    /// other sessions are ended): a login that checked the old password and is
    /// still on its way sees the epoch move and undoes itself.
    pub async fn password_changed(&self, user: UserId) -> Result<(), CacheError> {
        redis::cmd("INCR")
            .arg(self.keys.password_epoch(user))
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// Takes ended sessions out of their users' indexes.
    pub(super) async fn unindex(&self, ended: &[(SessionToken, UserId)]) -> Result<(), CacheError> {
        unindex(&self.conn, &self.keys, ended).await
    }

    /// The user's live sessions, most recently seen first. Entries left by a crash
    /// between a session's two writes are dropped on the way (see the module docs).
    pub async fn sessions_of(&self, user: UserId) -> Result<Vec<UserSession>, CacheError> {
        let mut conn = self.conn.clone();
        let key = self.keys.user_sessions(user);
        let raw: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        let mut leftovers = Vec::new();
        let mut listed = Vec::with_capacity(raw.len());
        for (id, value) in raw {
            match parse_entry(id.clone(), &value) {
                Some(session) => listed.push(session),
                None => leftovers.push(id),
            }
        }
        let mut pipe = redis::pipe();
        for s in &listed {
            pipe.hget(self.keys.login_of(&s.token), s.token.expose())
                .zscore(self.keys.recent_of(&s.token), s.token.expose());
        }
        // Each session's owner and last-seen time, pairs from the flat answer.
        let found: Vec<(Option<String>, Option<f64>)> = if listed.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut conn).await?
        };
        let now = crate::clock::unix_now();
        let me = user.to_string();
        let mut live = Vec::with_capacity(listed.len());
        for (mut session, (owner, seen)) in listed.into_iter().zip(found) {
            match (owner, seen) {
                (Some(owner), Some(seen)) if owner == me => {
                    session.last_seen = seen;
                    live.push(session);
                }
                // A login in progress: its session comes in a moment.
                _ if now - session.created < IN_FLIGHT => {}
                _ => leftovers.push(session.id),
            }
        }
        if !leftovers.is_empty() {
            redis::cmd("HDEL")
                .arg(&key)
                .arg(&leftovers)
                .exec_async(&mut conn)
                .await?;
        }
        live.sort_by(|a, b| b.last_seen.total_cmp(&a.last_seen));
        Ok(live)
    }

    /// Ends the user's session with this id (from the devices page), as logout
    /// does. Returns whether there was such a live session.
    pub async fn end_session(&self, user: UserId, id: &str) -> Result<bool, CacheError> {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(self.keys.user_sessions(user))
            .arg(id)
            .query_async(&mut self.conn.clone())
            .await?;
        let Some(session) = raw.and_then(|raw| parse_entry(id.to_owned(), &raw)) else {
            return Ok(false);
        };
        Ok(self.end_all(user, &[session]).await? == 1)
    }

    /// Ends every session of the user but `keep` ("log out everywhere else"; a
    /// password change), or every one when `keep` is `None`. Returns how many
    /// ended.
    pub async fn end_others(
        &self,
        user: UserId,
        keep: Option<&SessionToken>,
    ) -> Result<u64, CacheError> {
        let others: Vec<UserSession> = self
            .sessions_of(user)
            .await?
            .into_iter()
            .filter(|s| keep.is_none_or(|k| !s.is(k)))
            .collect();
        self.end_all(user, &others).await
    }

    /// Ends these sessions of `user` (each only if still theirs), all at once, then
    /// their index entries.
    async fn end_all(&self, user: UserId, sessions: &[UserSession]) -> Result<u64, CacheError> {
        if sessions.is_empty() {
            return Ok(0);
        }
        let now = crate::clock::unix_now();
        // At most a chunk of scripts in flight at once: a cap of 0 (none) lets a
        // list grow.
        let mut results: Vec<u64> = Vec::with_capacity(sessions.len());
        for chunk in sessions.chunks(64) {
            let calls = chunk.iter().map(|s| {
                let call = super::end_call(&self.keys, &s.token, Some(user));
                let mut conn = self.conn.clone();
                async move {
                    let (ended, _): (u64, Option<String>) = call.invoke_async(&mut conn).await?;
                    Ok::<_, redis::RedisError>(ended)
                }
            });
            results.extend(futures::future::try_join_all(calls).await?);
        }
        let ended: u64 = results.iter().sum();
        // An entry goes if its session ended here, or if it is no login in
        // flight (its session is gone): an entry whose session is about to go
        // live stays.
        let ids: Vec<&str> = sessions
            .iter()
            .zip(&results)
            .filter(|(s, ended)| **ended == 1 || now - s.created >= IN_FLIGHT)
            .map(|(s, _)| s.id.as_str())
            .collect();
        if ids.is_empty() {
            return Ok(ended);
        }
        redis::cmd("HDEL")
            .arg(self.keys.user_sessions(user))
            .arg(&ids)
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(ended)
    }

    /// Applies the cap of sessions per user after a login on `keep`, whose index
    /// held `listed` entries: the least recently seen sessions beyond it end
    /// (never `keep`). Returns how many.
    pub(super) async fn enforce_cap(
        &self,
        user: UserId,
        keep: &SessionToken,
        listed: usize,
    ) -> Result<u64, CacheError> {
        let most = self.max_per_user as usize;
        // The count came with the index entry: the full listing only when there
        // may be too many.
        if most == 0 || listed <= most {
            return Ok(0);
        }
        let live = self.sessions_of(user).await?;
        if live.len() <= most {
            return Ok(0);
        }
        // Most recently seen first: what lies past the cap goes, `keep` aside.
        let over: Vec<UserSession> = live
            .into_iter()
            .filter(|s| !s.is(keep))
            .skip(most.saturating_sub(1))
            .collect();
        self.end_all(user, &over).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_and_keeps_no_control_characters() {
        let token = SessionToken::generate();
        let device = Device {
            user_agent: "Mozilla/5.0\t(X11)\nevil".to_owned(),
            network: "203.0.113.0/24".to_owned(),
        };
        let raw = entry(&token, 1_700_000_000.25, &device);
        let back = parse_entry("x".into(), &raw).unwrap();
        assert!(back.is(&token));
        assert_eq!(back.created, 1_700_000_000.25);
        assert_eq!(back.device.user_agent, "Mozilla/5.0(X11)evil");
        assert_eq!(back.device.network, "203.0.113.0/24");
        assert!(parse_entry("x".into(), "garbage").is_none());
    }

    #[test]
    fn ids_are_stable_opaque_and_distinct() {
        let a = SessionToken::generate();
        let b = SessionToken::generate();
        assert_eq!(session_id(&a), session_id(&a));
        assert_ne!(session_id(&a), session_id(&b));
        assert_eq!(session_id(&a).len(), 24);
        assert!(!session_id(&a).contains(a.expose()));
    }
}
