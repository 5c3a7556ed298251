//! Login sessions keyed by a random token cookie: who is logged in, when each session
//! was last seen, and what it viewed (the book's `login:`, `recent:`, `viewed:<token>`),
//! plus the global view counts `viewed:` that decide what the page cache keeps, and
//! each item's distinct viewers (`viewers:<item>`, for [`crate::insights`]).
//!
//! [`Sessions::touch`] is called on every request and costs one round trip: a Lua
//! script, not a pipeline. Measured with `cargo bench -p shop-cache --bench session`
//! (50 concurrent callers, an item view by a logged-in session, 2026-11-21, see
//! BENCHMARKS.md): the script 31k touches/s, the book's five commands as one
//! pipeline 57k/s, one command per round trip 30k/s. The pipeline is faster because
//! it does less: the script also refuses tokens the shop never issued (a check and a
//! write that must be atomic, so no client can choose its token), stamps views with
//! the server's clock in strict order, counts the item's distinct viewers for the
//! insights, and returns the session's user, which saves a second round trip per
//! request. None of that can be done in a plain pipeline, so the script stays; making
//! it cheaper is the open performance item.

use std::fmt;
use std::str::FromStr;

use crate::RedisConn;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::domain::{InvalidInput, ItemId, UserId};
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// How many of a session's most recent item views `viewed:<token>` keeps.
pub const HISTORY_LEN: usize = 25;

/// How long a login form's one-time key remembers the session it made.
pub const LOGIN_ONCE_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// 128 random bits from the operating system's CSPRNG, as 22 URL-safe base64
/// characters. The only way to get one is to generate it or to parse a
/// well-formed one, so a hostile cookie never becomes part of a Redis key.
///
/// `Debug` does not print the token: it is a bearer secret and must not reach logs.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionToken(String);

impl SessionToken {
    /// Length of the text form: 16 bytes in unpadded base64.
    pub const LEN: usize = 22;

    /// A fresh token from the OS random source.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the operating system has no random source");
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The secret text, for the cookie and for building keys. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for SessionToken {
    type Err = InvalidInput;

    /// Accepts exactly what [`SessionToken::generate`] produces: 22 characters of the
    /// URL-safe alphabet that decode to 16 bytes with no stray trailing bits.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != Self::LEN {
            return Err(InvalidInput::SessionToken);
        }
        match URL_SAFE_NO_PAD.decode(s) {
            Ok(bytes) if bytes.len() == 16 => Ok(Self(s.to_owned())),
            _ => Err(InvalidInput::SessionToken),
        }
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(<redacted>)")
    }
}

/// What [`Sessions::touch_existing`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touched {
    /// A live session, logged in as this user (or a guest).
    Known(Option<UserId>),
    /// No such session (never issued, or cleaned): nothing was recorded.
    Unknown,
}

/// The session operations over one Redis. Clone it freely: the connection is shared.
#[derive(Clone)]
pub struct Sessions {
    conn: RedisConn,
    keys: Keys,
}

impl Sessions {
    /// Sessions stored under `keys`.
    pub fn new(conn: RedisConn, keys: Keys) -> Self {
        Self { conn, keys }
    }

    /// Records one request of a session in one round trip: last seen now, the user
    /// when logged in, and for an item page the view (kept in the session's 25 most
    /// recent, and counted in the global `viewed:` ranking). Returns the user the
    /// token is logged in as, so no second call to [`Sessions::check_token`] is needed.
    /// An unknown token starts a session (the book's behaviour).
    pub async fn touch(
        &self,
        token: &SessionToken,
        user: Option<UserId>,
        item: Option<ItemId>,
    ) -> Result<Option<UserId>, CacheError> {
        match self.run_touch(token, user, item, false).await? {
            Touched::Known(user) => Ok(user),
            Touched::Unknown => unreachable!("the script only refuses tokens that must exist"),
        }
    }

    /// [`Sessions::touch`] for a token presented by a client: an unknown token is
    /// refused ([`Touched::Unknown`], nothing written), so a client cannot choose its
    /// own token; the caller issues a fresh one instead.
    pub async fn touch_existing(
        &self,
        token: &SessionToken,
        item: Option<ItemId>,
    ) -> Result<Touched, CacheError> {
        self.run_touch(token, None, item, true).await
    }

    async fn run_touch(
        &self,
        token: &SessionToken,
        user: Option<UserId>,
        item: Option<ItemId>,
        must_exist: bool,
    ) -> Result<Touched, CacheError> {
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let (known, user): (i64, Option<String>) = scripts::TOUCH
            .key(self.keys.recent())
            .key(self.keys.login())
            .key(self.keys.viewed_by(token))
            .key(self.keys.item_views())
            .key(match item {
                Some(item) => self.keys.viewers(item, crate::insights::current_window()),
                // Declared but untouched without an item view.
                None => self.keys.item_views().to_owned(),
            })
            .arg(token.expose())
            .arg(opt(user.map(UserId::get)))
            .arg(opt(item.map(ItemId::get)))
            .arg(HISTORY_LEN)
            .arg(if must_exist { "1" } else { "0" })
            .arg(crate::insights::WINDOW_TTL.as_secs())
            .invoke_async(&mut self.conn.clone())
            .await?;
        if known == 0 {
            return Ok(Touched::Unknown);
        }
        let user = user
            .map(|raw| {
                raw.parse()
                    .map_err(|_| CacheError::Corrupt { what: "login:" })
            })
            .transpose()?;
        Ok(Touched::Known(user))
    }

    /// The user a token is logged in as, or `None` for a guest or unknown token.
    pub async fn check_token(&self, token: &SessionToken) -> Result<Option<UserId>, CacheError> {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(self.keys.login())
            .arg(token.expose())
            .query_async(&mut self.conn.clone())
            .await?;
        raw.map(|s| {
            s.parse()
                .map_err(|_| CacheError::Corrupt { what: "login:" })
        })
        .transpose()
    }

    /// Logs `user` in: returns a fresh token (so a token planted before login is
    /// worthless after it), in one atomic step. The old token is gone from every
    /// structure.
    ///
    /// - From a guest session, or one already logged in as `user`, the cart and the
    ///   viewed history move to the new token.
    /// - From a session logged in as someone else (a shared browser), they do not:
    ///   the other user's session ends as on logout, and `user` starts afresh. One
    ///   person's cart never becomes another's.
    /// - With a `once` key (the login form's one-time key), a second login with the
    ///   same key and user within [`LOGIN_ONCE_TTL`] returns the token the first one
    ///   made instead of rotating again: a double-submitted form used to rotate
    ///   twice, the second time from an empty guest session, orphaning the cart on the
    ///   first new token.
    pub async fn login(
        &self,
        old: &SessionToken,
        user: UserId,
        once: Option<&str>,
    ) -> Result<SessionToken, CacheError> {
        let new = SessionToken::generate();
        let token: String = scripts::LOGIN
            .key(self.keys.recent())
            .key(self.keys.login())
            .key(self.keys.viewed_by(old))
            .key(self.keys.viewed_by(&new))
            .key(self.keys.cart(old))
            .key(self.keys.cart(&new))
            .key(match once {
                Some(key) => self.keys.login_once(key),
                // Declared but untouched without a key.
                None => self.keys.recent().to_owned(),
            })
            .arg(old.expose())
            .arg(new.expose())
            .arg(user)
            .arg(if once.is_some() { "1" } else { "0" })
            .arg(LOGIN_ONCE_TTL.as_secs())
            .invoke_async(&mut self.conn.clone())
            .await?;
        token.parse().map_err(|_| CacheError::Corrupt {
            what: "login-once:",
        })
    }

    /// Ends a session: its login, last-seen entry, history and cart are removed
    /// together, so the token is worth nothing afterwards.
    pub async fn logout(&self, token: &SessionToken) -> Result<(), CacheError> {
        redis::pipe()
            .atomic()
            .hdel(self.keys.login(), token.expose())
            .zrem(self.keys.recent(), token.expose())
            .del(self.keys.viewed_by(token))
            .del(self.keys.cart(token))
            .exec_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The session's recently viewed items, most recent first.
    pub async fn recently_viewed(&self, token: &SessionToken) -> Result<Vec<ItemId>, CacheError> {
        let raw: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.keys.viewed_by(token))
            .arg(0)
            .arg(-1)
            .arg("REV")
            .query_async(&mut self.conn.clone())
            .await?;
        raw.iter()
            .map(|s| {
                s.parse().map_err(|_| CacheError::Corrupt {
                    what: "viewed:<token>",
                })
            })
            .collect()
    }

    /// How many sessions exist (the size of `recent:`), for metrics.
    pub async fn count(&self) -> Result<u64, CacheError> {
        Ok(redis::cmd("ZCARD")
            .arg(self.keys.recent())
            .query_async(&mut self.conn.clone())
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_tokens_parse_and_differ() {
        let a = SessionToken::generate();
        let b = SessionToken::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), SessionToken::LEN);
        assert_eq!(a.expose().parse::<SessionToken>().unwrap(), a);
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let good = SessionToken::generate();
        let long = format!("{}A", good.expose());
        for bad in [
            "",
            "short",
            &long,
            "AAAAAAAAAAAAAAAAAAAAA=", // padding
            "AAAAAAAAAAAAAAAAAAAAA+", // standard, not URL-safe alphabet
            "AAAAAAAAAAAAAAAAAAAAA/", // standard, not URL-safe alphabet
            "AAAAAAAAAAAAAAAAAAAAA:", // would be a key separator
            "AAAAAAAAAAAAAAAAAAAAAB", // stray trailing bits: not canonical
            "AAAAAAAAAAAAAAAAAAAA é", // non-ASCII
            "AAAAAAAAAA AAAAAAAAAAA",
        ] {
            assert_eq!(
                bad.parse::<SessionToken>(),
                Err(InvalidInput::SessionToken),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn debug_does_not_leak_the_token() {
        let t = SessionToken::generate();
        assert!(!format!("{t:?}").contains(t.expose()));
    }

    proptest! {
        #[test]
        fn parsing_accepts_only_what_it_would_generate(s in "\\PC{0,30}") {
            if let Ok(t) = s.parse::<SessionToken>() {
                let bytes = URL_SAFE_NO_PAD.decode(t.expose()).unwrap();
                prop_assert_eq!(URL_SAFE_NO_PAD.encode(bytes), s);
            }
        }

        #[test]
        fn any_sixteen_bytes_round_trip(bytes in proptest::array::uniform16(any::<u8>())) {
            let text = URL_SAFE_NO_PAD.encode(bytes);
            prop_assert!(text.parse::<SessionToken>().is_ok());
        }
    }
}
