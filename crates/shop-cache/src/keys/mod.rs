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
                    guests: p("guests:"),
                    anonymous: p("anonymous:"),
                    login: p("login:"),
                    logins: p("logins:"),
                    // `viewed:<token>` shares its stem with the global `viewed:` zset.
                    viewed_by: p("viewed:"),
                    cart: p("cart:"),
                }],
                item_views: p("viewed:"),
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
                            guests: p(&format!("guests:{{s{s}}}")),
                            anonymous: p(&format!("anonymous:{{s{s}}}")),
                            login: p(&format!("login:{{s{s}}}")),
                            logins: p(&format!("logins:{{s{s}}}")),
                            viewed_by: p(&format!("viewed:{{s{s}}}")),
                            cart: p(&format!("cart:{{s{s}}}")),
                        })
                        .collect(),
                    item_views: p("viewed:{views}"),
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

    /// Hash: session token -> user id, for the logged-in sessions of one shard.
    pub fn login_in(&self, shard: Shard) -> &str {
        &self.shard(shard).login
    }

    /// Sorted set: session token -> last-seen unix time, for every session of one shard.
    pub fn recent_in(&self, shard: Shard) -> &str {
        &self.shard(shard).recent
    }

    /// Sorted set: session token -> last-seen unix time, for the *guest* sessions of
    /// one shard (not logged in, no cart): a subset of [`Keys::recent_in`], which the
    /// cleaner empties first and whose idle members expire. Not one of the book's
    /// keys: the book's code neither reads nor needs it (its sessions are all in
    /// `recent:`, and the cleaner drops entries whose session is gone).
    pub fn guests_in(&self, shard: Shard) -> &str {
        &self.shard(shard).guests
    }

    /// Sorted set: session token -> last-seen unix time, for the *anonymous
    /// shoppers* of one shard (not logged in, holding a cart): a subset of
    /// [`Keys::recent_in`], which the cleaner empties after the guests and before
    /// any logged-in session, so a flood of cookieless cart posts never removes a
    /// shopper who logged in. Kept by the cart, the touch and login; not one of the
    /// book's keys.
    pub fn anonymous_in(&self, shard: Shard) -> &str {
        &self.shard(shard).anonymous
    }

    /// [`Keys::anonymous_in`] the token's shard.
    pub fn anonymous_of(&self, token: &SessionToken) -> &str {
        self.anonymous_in(self.shard_of(token))
    }

    /// Sorted set: session token -> unix time it logged in, for the logged-in
    /// sessions of one shard: what the absolute lifetime counts from (the touch
    /// refuses, and the cleaner removes, a session logged in longer ago). Not one
    /// of the book's keys; a login the book's code wrote gets its entry at the
    /// shop's first touch of it.
    pub fn logins_in(&self, shard: Shard) -> &str {
        &self.shard(shard).logins
    }

    /// [`Keys::logins_in`] the token's shard.
    pub fn logins_of(&self, token: &SessionToken) -> &str {
        self.logins_in(self.shard_of(token))
    }

    /// [`Keys::guests_in`] the token's shard.
    pub fn guests_of(&self, token: &SessionToken) -> &str {
        self.guests_in(self.shard_of(token))
    }

    /// [`Keys::login_in`] the token's shard.
    pub fn login_of(&self, token: &SessionToken) -> &str {
        self.login_in(self.shard_of(token))
    }

    /// [`Keys::recent_in`] the token's shard.
    pub fn recent_of(&self, token: &SessionToken) -> &str {
        self.recent_in(self.shard_of(token))
    }

    /// Sorted set: item id -> time viewed, the session's most recent views.
    pub fn viewed_by(&self, token: &SessionToken) -> String {
        self.viewed_by_member(self.shard_of(token), token.expose())
    }

    /// Hash: item id -> quantity, the session's cart.
    pub fn cart(&self, token: &SessionToken) -> String {
        self.cart_member(self.shard_of(token), token.expose())
    }

    /// String: the checkout holding the session's cart (a random value of the
    /// holder's), so two checkouts of one cart (two tabs) cannot both order it.
    /// It expires on its own (a server that died mid-checkout holds it no longer).
    pub fn checkout_hold(&self, token: &SessionToken) -> String {
        format!("{}checkout:{}", self.0.prefix, token.expose())
    }

    /// In the book layout (one node), what goes before a token in the names of its
    /// `viewed:<token>` and `cart:<token>` keys, for the one script that names a
    /// session's keys itself (the cleaner's: see the module docs); none in the
    /// cluster layout, whose scripts are given every key.
    pub fn session_stems(&self, shard: Shard) -> Option<(&str, &str)> {
        match self.0.layout {
            Layout::Book => {
                let names = self.shard(shard);
                Some((&names.viewed_by, &names.cart))
            }
            Layout::Cluster { .. } => None,
        }
    }

    /// [`Keys::viewed_by`] for a member read back from a shard's `recent:` (by the
    /// cleaner). Not parsed as a [`SessionToken`]: sessions written by the book's
    /// own code have other tokens (UUIDs), and their keys must go with them.
    pub fn viewed_by_member(&self, shard: Shard, member: &str) -> String {
        format!("{}{member}", self.shard(shard).viewed_by)
    }

    /// [`Keys::cart`] for a member read back from a shard's `recent:`.
    pub fn cart_member(&self, shard: Shard, member: &str) -> String {
        format!("{}{member}", self.shard(shard).cart)
    }

    /// String: the user and new session a login form's one-time key produced (or
    /// `<user> -` while it is being made), so a double-submitted form logs in once.
    /// A key of its own: the second submit comes from another session, in any
    /// shard. The client's key is hashed: no client text becomes part of a key.
    pub fn login_once(&self, form_key: &str) -> String {
        format!("{}login-once:{}", self.0.prefix, digest(form_key))
    }

    /// Sorted set: item id -> minus its view count (most viewed at rank 0).
    pub fn item_views(&self) -> &str {
        &self.0.item_views
    }

    /// HyperLogLog: the distinct sessions that viewed the item in one insights
    /// window (`window` counts windows since the Unix epoch; the key expires).
    pub fn viewers(&self, item: ItemId, window: u64) -> String {
        self.item_key("viewers:", item, &format!(":{window}"))
    }

    /// HyperLogLog: the distinct sessions that bought the item in one insights window.
    pub fn buyers(&self, item: ItemId, window: u64) -> String {
        self.item_key("buyers:", item, &format!(":{window}"))
    }

    /// Sorted set: other item id -> how often it was bought with the item since it
    /// came into the list (forward-decayed, bounded: see `insights`).
    pub fn also_bought(&self, item: ItemId) -> String {
        self.item_key("also:", item, "")
    }

    /// Sorted set: item id -> how many orders held it (forward-decayed, as the
    /// also-bought counts), the popularity the also-bought score corrects for.
    pub fn bought(&self) -> &str {
        &self.0.bought
    }

    /// String: how many orders there were (forward-decayed), beside `bought:`.
    pub fn orders(&self) -> &str {
        &self.0.orders
    }

    /// The keys of the also-bought decay before forward decay, for their one-time
    /// removal by `shop migrate`: the rescale number, the last one decayed to, and
    /// the set of items that have a list (in that order).
    pub fn old_also_bought_decay(&self) -> [String; 3] {
        let tag = match self.0.layout {
            Layout::Book => "",
            Layout::Cluster { .. } => "{views}",
        };
        ["also-epoch:", "also-decayed:", "also-index:"]
            .map(|name| format!("{}{name}{tag}", self.0.prefix))
    }

    /// The hash of the old decay's marks that held `item`'s (one for every item in
    /// the book layout, one per item in the cluster layout), for `shop migrate`.
    pub fn old_also_bought_marks(&self, item: ItemId) -> String {
        match self.0.layout {
            Layout::Book => format!("{}also-epochs:", self.0.prefix),
            Layout::Cluster { .. } => self.item_key("also-epochs:", item, ""),
        }
    }

    /// What began the viewer and buyer counts of the layout before insight windows
    /// (`viewers:<item>`, no window, no expiry), for their one-time removal. None in
    /// the cluster layout, which never had them.
    pub fn unwindowed_count_prefixes(&self) -> Vec<String> {
        match self.0.layout {
            Layout::Book => vec![
                format!("{}viewers:", self.0.prefix),
                format!("{}buyers:", self.0.prefix),
            ],
            Layout::Cluster { .. } => Vec::new(),
        }
    }

    /// `<prefix><name><item><rest>`, the item in a hash tag in the cluster layout.
    /// A single key of another crate's feature (the page cache's), under this
    /// shop's prefix: `<prefix><name>`. No hash tag: it spreads by its own hash.
    pub fn named(&self, name: &str) -> String {
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

    /// String: the server time (unix seconds) of the last rescale of `viewed:`, so
    /// several workers rescale once per interval.
    pub fn views_rescaled(&self) -> &str {
        &self.0.views_rescaled
    }

    /// String: a login attempt counter for one client address or account name
    /// (`scope` is `ip` or `name`) in the current window; the value is hashed.
    pub fn login_attempts(&self, scope: &str, value: &str) -> String {
        self.rate_limit(&format!("login:{scope}"), value)
    }

    /// The two keys of one account name's login limit, in one slot (a hash tag of
    /// the name's digest) so one script reads and writes both: the counter of
    /// attempts that were not successful logins in the current window (string),
    /// and the slow-down slot (string, expiring) that lets one attempt through
    /// every so often once the counter is full.
    pub fn login_name_limit(&self, name: &str) -> (String, String) {
        let d = digest(name);
        (
            format!("{}limit:login:name:{{n{d}}}", self.0.prefix),
            format!("{}limit:login:slow:{{n{d}}}", self.0.prefix),
        )
    }

    /// String: the failed login attempts on `name` made with one device cookie
    /// (`cookie`) in the current window, in the name's slot: a device cookie
    /// lets its holder through the name's slow-down only while these stay under
    /// the name's limit.
    pub fn login_device_failures(&self, name: &str, cookie: &str) -> String {
        format!(
            "{}limit:login:dev:{{n{}}}:{}",
            self.0.prefix,
            digest(name),
            digest(cookie)
        )
    }

    /// String: the key that signs device cookies (a browser's proof that it logged
    /// in to an account before), random, made by the first web server that needs
    /// it and shared by all.
    pub fn device_key(&self) -> String {
        format!("{}device-key", self.0.prefix)
    }

    /// String: a rate-limit counter of one kind of request (`scope`, e.g. `buy`)
    /// by one client (`who`: an account id) in the current window; hashed.
    pub fn rate_limit(&self, scope: &str, who: &str) -> String {
        format!("{}limit:{scope}:{}", self.0.prefix, digest(who))
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
        format!("{}{row}", self.0.inventory)
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

    /// Hash: a flash sale's `stock` (units not yet reserved), `start`, `end`,
    /// `price_cents` and `seq` (the last reservation number).
    pub fn sale(&self, item: ItemId) -> String {
        self.sale_key("sale:", item)
    }

    /// Hash: user id -> units reserved or bought in the sale (the per-user limit).
    pub fn sale_buyers(&self, item: ItemId) -> String {
        self.sale_key("sale-buyers:", item)
    }

    /// Hash: `<user>:<idempotency key>` -> the answer given (or `pending:<n>` while
    /// reservation n's order is being written).
    pub fn sale_answers(&self, item: ItemId) -> String {
        self.sale_key("sale-answers:", item)
    }

    /// Sorted set: reservation number -> unix time by which its order should be
    /// recorded (after which the reconciler settles it).
    pub fn sale_pending(&self, item: ItemId) -> String {
        self.sale_key("sale-pending:", item)
    }

    /// Hash: reservation number -> `<user>:<idempotency key>`, for the reconciler.
    pub fn sale_held(&self, item: ItemId) -> String {
        self.sale_key("sale-held:", item)
    }

    /// Hash: session id -> the session (its token, when it logged in, its device):
    /// every logged-in session of one user, the index behind "log out everywhere"
    /// and the cap per user (see [`crate::session::user_sessions`]). On a cluster
    /// it is under the user's own tag (`{u<id>}`), in another slot than the
    /// sessions it lists.
    pub fn user_sessions(&self, user: crate::domain::UserId) -> String {
        match self.0.layout {
            Layout::Book => format!("{}user-sessions:{user}", self.0.prefix),
            Layout::Cluster { .. } => format!("{}user-sessions:{{u{user}}}", self.0.prefix),
        }
    }

    /// String: how many times the user's password has changed (a counter, absent
    /// until the first change), beside their list of sessions: a login whose
    /// password check raced a change sees it move, and is undone.
    pub fn password_epoch(&self, user: crate::domain::UserId) -> String {
        match self.0.layout {
            Layout::Book => format!("{}password-epoch:{user}", self.0.prefix),
            Layout::Cluster { .. } => format!("{}password-epoch:{{u{user}}}", self.0.prefix),
        }
    }

    /// Sorted set: item -> end of its sale (unix seconds): the sales loaded in Redis.
    pub fn sales(&self) -> String {
        format!("{}sales:", self.0.prefix)
    }
}

/// A short, stable stand-in for client-supplied text inside a key.
fn digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(text.as_bytes())[..16])
}

#[cfg(test)]
mod tests;
