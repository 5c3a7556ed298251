//! Every Redis key the shop uses, built in this one place, in one of two layouts.
//!
//! - [`Layout::Book`] (the default): the book's names (`login:`, `recent:`,
//!   `viewed:<token>`, ...), so data written by the book's code and tools written for
//!   it interoperate. Needs one Redis node: the scripts touch keys in many slots.
//! - [`Layout::Cluster`]: the same data arranged for Redis Cluster. A script or a
//!   transaction may only touch keys of one hash slot, so keys that change together
//!   share a hash tag (`{...}`):
//!   - the session index is split into S shards by the token (`recent:{s12}`,
//!     `login:{s12}`), and a session's own keys carry its shard's tag
//!     (`viewed:{s12}<token>`, `cart:{s12}<token>`), so touch, login rotation,
//!     logout and the cleaner each stay in one slot;
//!   - the row cache's keys share `{rows}`; the view ranking and its rescale
//!     marker share `{views}`; an item's insights share `{i<item>}`, the
//!     popularity they are judged against (`bought:`, `orders:`) `{orders}`; an item's
//!     flash sale (`sale:{f<item>}` and its buyers, answers and reservations) shares
//!     `{f<item>}`;
//!   - pages, render locks, login counters, login forms' one-time keys and the
//!     list of loaded sales (`sales:`) are single keys: no tag, spread by their own hash.
//!
//! A prefix (namespace) lets several shops share one Redis. Nothing outside this
//! module formats a key, and every key a Lua script touches is passed to it in
//! `KEYS` (none is built inside a script), in both layouts, with one exception on
//! one node: the session cleaner's script names the `viewed:<token>` and
//! `cart:<token>` keys of the sessions it picks from the stems
//! [`Keys::session_stems`] gives it, so that it can pick and remove in one atomic
//! call (Redis allows a script keys it was not given on one node, not on a cluster).

use std::sync::Arc;

use crate::domain::{ItemId, SessionToken};

/// How the keys are arranged (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The book's names, one Redis node.
    Book,
    /// Hash-tagged names for Redis Cluster, the session index in `shards` parts.
    Cluster {
        /// How many parts the session index (`recent:`, `login:`) is split into.
        shards: u32,
    },
}

/// The default number of session shards of the cluster layout: enough that the
/// sessions spread evenly over the primaries of any cluster up to a few dozen
/// nodes, few enough that the cleaner's pass over every shard stays short.
pub const DEFAULT_SHARDS: u32 = 64;

/// The most session shards accepted.
pub const MAX_SHARDS: u32 = 16_384;

/// One part of the session index. Every session belongs to exactly one, decided by
/// its token ([`Keys::shard_of`]); the book layout has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard(u32);

impl Shard {
    /// The shard's number, `0..shards`.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// The key names of one shop (one prefix, one layout). Build once at start-up;
/// cloning is one reference count (every request clones the handles that hold it: a
/// profile of the cached item view found per-request string copies here at 3% of
/// the web tier's CPU, and their allocations behind much of the 40% it spent in
/// malloc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys(Arc<Names>);

#[derive(Debug, PartialEq, Eq)]
struct Names {
    layout: Layout,
    prefix: String,
    /// Per shard: `recent:`, `login:`, and what goes before a token in
    /// `viewed:<token>` and `cart:<token>`.
    shards: Vec<ShardNames>,
    item_views: String,
    unranked: String,
    views_rescaled: String,
    bought: String,
    orders: String,
    schedule: String,
    delay: String,
    inventory: String,
}

#[derive(Debug, PartialEq, Eq)]
struct ShardNames {
    recent: String,
    ended: String,
    guests: String,
    anonymous: String,
    login: String,
    logins: String,
    viewed_by: String,
    cart: String,
}

impl Default for Keys {
    /// The book's layout with no prefix.
    fn default() -> Self {
        Self::with_prefix("")
    }
}

/// Why a layout was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the number of session shards must be 1..={MAX_SHARDS}, got {0}")]
pub struct BadShards(pub u32);

impl Keys {
    /// The book's layout under `prefix` (for example `"shop1:"`; empty for none).
    pub fn with_prefix(prefix: &str) -> Self {
        Self::new(prefix, Layout::Book).expect("the book layout is always valid")
    }

    /// The keys of `layout` under `prefix`.
    pub fn new(prefix: &str, layout: Layout) -> Result<Self, BadShards> {
        let p = |name: &str| format!("{prefix}{name}");
        let names = match layout {
            Layout::Book => Names {
                layout,
                prefix: prefix.to_owned(),
                shards: vec![ShardNames {
                    recent: p("recent:"),
                    ended: p("ended:"),
                    guests: p("guests:"),
                    anonymous: p("anonymous:"),
                    login: p("login:"),
                    logins: p("logins:"),
                    // `viewed:<token>` shares its stem with the global `viewed:` zset.
                    viewed_by: p("viewed:"),
                    cart: p("cart:"),
                }],
                item_views: p("viewed:"),
                unranked: p("unranked:"),
                views_rescaled: p("rescaled:"),
                bought: p("bought:"),
                orders: p("orders:"),
                schedule: p("schedule:"),
                delay: p("delay:"),
                inventory: p("inv:"),
            },
            Layout::Cluster { shards } => {
                if !(1..=MAX_SHARDS).contains(&shards) {
                    return Err(BadShards(shards));
                }
                Names {
                    layout,
                    prefix: prefix.to_owned(),
                    shards: (0..shards)
                        .map(|s| ShardNames {
                            recent: p(&format!("recent:{{s{s}}}")),
                            ended: p(&format!("ended:{{s{s}}}")),
                            guests: p(&format!("guests:{{s{s}}}")),
                            anonymous: p(&format!("anonymous:{{s{s}}}")),
                            login: p(&format!("login:{{s{s}}}")),
                            logins: p(&format!("logins:{{s{s}}}")),
                            viewed_by: p(&format!("viewed:{{s{s}}}")),
                            cart: p(&format!("cart:{{s{s}}}")),
                        })
                        .collect(),
                    item_views: p("viewed:{views}"),
                    unranked: p("unranked:{views}"),
                    views_rescaled: p("rescaled:{views}"),
                    bought: p("bought:{orders}"),
                    orders: p("orders:{orders}"),
                    schedule: p("schedule:{rows}"),
                    delay: p("delay:{rows}"),
                    inventory: p("inv:{rows}"),
                }
            }
        };
        Ok(Self(Arc::new(names)))
    }

    /// The cluster layout with [`DEFAULT_SHARDS`] session shards under `prefix`.
    pub fn cluster(prefix: &str) -> Self {
        Self::new(
            prefix,
            Layout::Cluster {
                shards: DEFAULT_SHARDS,
            },
        )
        .expect("the default shard count is valid")
    }

    /// How these keys are arranged.
    pub fn layout(&self) -> Layout {
        self.0.layout
    }

    /// The namespace every key starts with.
    pub fn prefix(&self) -> &str {
        &self.0.prefix
    }

    /// Every shard of the session index (one in the book layout), for the daemons
    /// and counts that visit them all.
    pub fn shards(&self) -> impl ExactSizeIterator<Item = Shard> + use<> {
        (0..self.0.shards.len() as u32).map(Shard)
    }

    /// The shard a session belongs to: a stable hash of its token (FNV-1a), the
    /// same in every process and release.
    pub fn shard_of(&self, token: &SessionToken) -> Shard {
        let n = self.0.shards.len() as u32;
        if n == 1 {
            return Shard(0);
        }
        let mut h: u32 = 0x811c_9dc5;
        for b in token.expose().bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        Shard(h % n)
    }

    /// A fresh token in the same shard as `old`, so a login's move of the session
    /// from one token to the other stays inside one hash slot (one atomic script).
    /// Drawn at random until one falls in the shard (S draws on average); the token
    /// keeps 128 random bits, of which the shard is public anyway.
    pub fn fresh_token_beside(&self, old: &SessionToken) -> SessionToken {
        let shard = self.shard_of(old);
        loop {
            let token = SessionToken::generate();
            if self.shard_of(&token) == shard {
                return token;
            }
        }
    }

    fn shard(&self, shard: Shard) -> &ShardNames {
        &self.0.shards[shard.0 as usize]
    }

    /// `<prefix><name><item><rest>`, the item in a hash tag in the cluster layout.
    /// A single key of another crate's feature (the page cache's), under this
    /// shop's prefix: `<prefix><name>` (pass `format_args!` for a name with parts:
    /// one allocation). No hash tag: it spreads by its own hash.
    pub fn named(&self, name: impl std::fmt::Display) -> String {
        format!("{}{name}", self.0.prefix)
    }

    /// A key of another crate's feature that must share a hash slot with the other
    /// keys of the same `group` and `id` (a script touches them together): the
    /// book layout's `<prefix><name><id>`, the cluster layout's
    /// `<prefix><name>{<group><id>}`. The one place besides this module's own keys
    /// where the hash-tag policy is applied.
    pub fn slotted(&self, name: &str, group: &str, id: &str) -> String {
        match self.0.layout {
            Layout::Book => format!("{}{name}{id}", self.0.prefix),
            Layout::Cluster { .. } => format!("{}{name}{{{group}{id}}}", self.0.prefix),
        }
    }

    fn item_key(&self, name: &str, item: ItemId, rest: &str) -> String {
        match self.0.layout {
            Layout::Book => format!("{}{name}{item}{rest}", self.0.prefix),
            Layout::Cluster { .. } => format!("{}{name}{{i{item}}}{rest}", self.0.prefix),
        }
    }

    /// `<prefix><name><item>`, the item in a `{f<item>}` hash tag in the cluster
    /// layout: every key of one item's flash sale in one slot, so one script can
    /// decide a buy.
    fn sale_key(&self, name: &str, item: ItemId) -> String {
        match self.0.layout {
            Layout::Book => format!("{}{name}{item}", self.0.prefix),
            Layout::Cluster { .. } => format!("{}{name}{{f{item}}}", self.0.prefix),
        }
    }
}

/// A short, stable stand-in for client-supplied text inside a key.
fn digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(text.as_bytes())[..16])
}

mod analytics;
mod logins;
mod rows;
mod sales;
mod sessions;

#[cfg(test)]
mod tests;
