//! Every Redis key the shop uses, built in this one place.
//!
//! The default layout is the book's (`login:`, `recent:`, `viewed:<token>`, ...), so
//! data written by the book's code and tools written for it interoperate. A prefix
//! (namespace) lets several shops share one Redis. A Redis Cluster layout with hash
//! tags (a sharded session index) is to be added here, without touching callers:
//! nothing outside this module formats a key, and Lua scripts receive their keys and
//! key prefixes from here.

use std::sync::Arc;

use crate::domain::ItemId;
use crate::session::SessionToken;

/// The key names of one shop (one prefix). Build once at start-up; cloning is one
/// reference count (every request clones the handles that hold it: a profile of the
/// cached item view found per-request string copies here at 3% of the web tier's CPU,
/// and their allocations behind much of the 40% it spent in malloc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys(Arc<Names>);

#[derive(Debug, PartialEq, Eq)]
struct Names {
    prefix: String,
    login: String,
    recent: String,
    item_views: String,
    schedule: String,
    delay: String,
}

impl Default for Keys {
    /// The book's layout with no prefix.
    fn default() -> Self {
        Self::with_prefix("")
    }
}

impl Keys {
    /// The book's layout under `prefix` (for example `"shop1:"`; empty for none).
    pub fn with_prefix(prefix: &str) -> Self {
        let p = |name: &str| format!("{prefix}{name}");
        Self(Arc::new(Names {
            prefix: prefix.to_owned(),
            login: p("login:"),
            recent: p("recent:"),
            item_views: p("viewed:"),
            schedule: p("schedule:"),
            delay: p("delay:"),
        }))
    }

    /// The namespace every key starts with.
    pub fn prefix(&self) -> &str {
        &self.0.prefix
    }

    /// Hash: session token -> user id, for logged-in sessions only.
    pub fn login(&self) -> &str {
        &self.0.login
    }

    /// Sorted set: session token -> last-seen unix time, for every session.
    pub fn recent(&self) -> &str {
        &self.0.recent
    }

    /// Sorted set: item id -> time viewed, the session's most recent views.
    pub fn viewed_by(&self, token: &SessionToken) -> String {
        format!("{}{}", self.viewed_by_prefix(), token.expose())
    }

    /// What [`Keys::viewed_by`] puts before the token, for Lua scripts that
    /// build the key of a token they read from `recent:`.
    pub fn viewed_by_prefix(&self) -> &str {
        // `viewed:<token>` shares its stem with the global `viewed:` zset.
        &self.0.item_views
    }

    /// Hash: item id -> quantity, the session's cart.
    pub fn cart(&self, token: &SessionToken) -> String {
        format!("{}{}", self.cart_prefix(), token.expose())
    }

    /// What [`Keys::cart`] puts before the token, for Lua scripts.
    pub fn cart_prefix(&self) -> String {
        format!("{}cart:", self.0.prefix)
    }

    /// Sorted set: item id -> minus its view count (most viewed at rank 0).
    pub fn item_views(&self) -> &str {
        &self.0.item_views
    }

    /// HyperLogLog: the distinct sessions that viewed the item in one insights
    /// window (`window` counts windows since the Unix epoch; the key expires).
    pub fn viewers(&self, item: ItemId, window: u64) -> String {
        format!("{}{item}:{window}", self.viewers_prefix())
    }

    /// What [`Keys::viewers`] puts before the item id.
    pub fn viewers_prefix(&self) -> String {
        format!("{}viewers:", self.0.prefix)
    }

    /// HyperLogLog: the distinct sessions that bought the item in one insights window.
    pub fn buyers(&self, item: ItemId, window: u64) -> String {
        format!("{}{item}:{window}", self.buyers_prefix())
    }

    /// What [`Keys::buyers`] puts before the item id.
    pub fn buyers_prefix(&self) -> String {
        format!("{}buyers:", self.0.prefix)
    }

    /// String: the rescale number (incremented by each view rescale) the also-bought
    /// lists must be decayed to.
    pub fn also_bought_epoch(&self) -> String {
        format!("{}also-epoch:", self.0.prefix)
    }

    /// String: the last rescale number whose also-bought decay finished.
    pub fn also_bought_decayed(&self) -> String {
        format!("{}also-decayed:", self.0.prefix)
    }

    /// Hash: item id -> the rescale number its also-bought list was last decayed to,
    /// so a decay repeated after a failure halves no list twice.
    pub fn also_bought_list_epochs(&self) -> String {
        format!("{}also-epochs:", self.0.prefix)
    }

    /// String: the new session a login form's one-time key already produced, so a
    /// double-submitted form logs in once. The client's key is hashed: no client
    /// text becomes part of a key.
    pub fn login_once(&self, form_key: &str) -> String {
        format!("{}login-once:{}", self.0.prefix, digest(form_key))
    }

    /// String: a login attempt counter for one client address or account name
    /// (`scope` is `ip` or `name`) in the current window; the value is hashed.
    pub fn login_attempts(&self, scope: &str, value: &str) -> String {
        format!("{}limit:login:{scope}:{}", self.0.prefix, digest(value))
    }

    /// Sorted set: other item id -> how often it was bought with the item.
    pub fn also_bought(&self, item: ItemId) -> String {
        format!("{}{item}", self.also_bought_prefix())
    }

    /// What [`Keys::also_bought`] puts before the item id, for Lua scripts.
    pub fn also_bought_prefix(&self) -> String {
        format!("{}also:", self.0.prefix)
    }

    /// Set: the items that have an also-bought list, so the decay can find them.
    pub fn also_bought_index(&self) -> String {
        format!("{}also-index:", self.0.prefix)
    }

    /// String: the server time (unix seconds) of the last rescale of `viewed:`, so
    /// several workers rescale once per interval.
    pub fn views_rescaled(&self) -> String {
        format!("{}rescaled:", self.0.prefix)
    }

    /// String: a cached page, under the stable hash of its normalised request.
    pub fn page(&self, request_hash: &str) -> String {
        format!("{}cache:{request_hash}", self.0.prefix)
    }

    /// String: held (`SET NX PX`) by the one process rendering a missing page, so a
    /// popular page that expires is rendered once, not once per request.
    pub fn page_lock(&self, request_hash: &str) -> String {
        format!("{}lock:cache:{request_hash}", self.0.prefix)
    }

    /// Sorted set: row id -> unix time of its next refresh.
    pub fn schedule(&self) -> &str {
        &self.0.schedule
    }

    /// Sorted set: row id -> refresh interval in seconds (<= 0: stop caching).
    pub fn delay(&self) -> &str {
        &self.0.delay
    }

    /// String: the row as a JSON object.
    pub fn inventory(&self, row: ItemId) -> String {
        format!("{}{row}", self.inventory_prefix())
    }

    /// What [`Keys::inventory`] puts before the row id, for Lua scripts.
    pub fn inventory_prefix(&self) -> String {
        format!("{}inv:", self.0.prefix)
    }
}

/// A short, stable stand-in for client-supplied text inside a key.
fn digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(text.as_bytes())[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_the_books() {
        let k = Keys::default();
        let t: SessionToken = "AAAAAAAAAAAAAAAAAAAAAA".parse().unwrap();
        assert_eq!(k.login(), "login:");
        assert_eq!(k.recent(), "recent:");
        assert_eq!(k.viewed_by(&t), "viewed:AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(k.cart(&t), "cart:AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(k.item_views(), "viewed:");
        assert_eq!(k.page("abc"), "cache:abc");
        assert_eq!(k.views_rescaled(), "rescaled:");
        assert_eq!(k.page_lock("abc"), "lock:cache:abc");
        let i = ItemId::new(3).unwrap();
        assert_eq!(k.viewers(i, 2958), "viewers:3:2958");
        assert_eq!(k.buyers(i, 2958), "buyers:3:2958");
        assert_eq!(k.login_once("x"), k.login_once("x"));
        assert_ne!(k.login_once("x"), k.login_once("y"));
        assert!(k.login_once("x").starts_with("login-once:"));
        assert!(!k.login_attempts("name", "alice").contains("alice"));
        assert_eq!(k.also_bought(i), "also:3");
        assert_eq!(k.also_bought_index(), "also-index:");
        assert_eq!(k.schedule(), "schedule:");
        assert_eq!(k.delay(), "delay:");
        assert_eq!(k.inventory(ItemId::new(7).unwrap()), "inv:7");
    }

    #[test]
    fn prefix_applies_to_every_key() {
        let k = Keys::with_prefix("s1:");
        let t: SessionToken = "AAAAAAAAAAAAAAAAAAAAAA".parse().unwrap();
        let all = [
            k.login().to_owned(),
            k.recent().to_owned(),
            k.viewed_by(&t),
            k.cart(&t),
            k.item_views().to_owned(),
            k.views_rescaled(),
            k.page("x"),
            k.page_lock("x"),
            k.viewers(ItemId::new(1).unwrap(), 1),
            k.buyers(ItemId::new(1).unwrap(), 1),
            k.also_bought_epoch(),
            k.also_bought_decayed(),
            k.also_bought_list_epochs(),
            k.login_once("k"),
            k.login_attempts("ip", "127.0.0.1"),
            k.also_bought(ItemId::new(1).unwrap()),
            k.also_bought_index(),
            k.schedule().to_owned(),
            k.delay().to_owned(),
            k.inventory(ItemId::new(1).unwrap()),
        ];
        for key in all {
            assert!(key.starts_with("s1:"), "{key}");
        }
        assert_eq!(k.cart_prefix(), "s1:cart:");
        assert_eq!(k.viewed_by_prefix(), "s1:viewed:");
    }
}
