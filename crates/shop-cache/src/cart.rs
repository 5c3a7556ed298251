//! Shopping carts, a hash of item id -> quantity each: a guest's is its browser
//! session's (`cart:<token>`, as in the book, whose functions still read and write
//! it); a logged-in user's is the account's (`user-cart:<user>`), read and written
//! by every session of theirs, so the laptop and the phone show the same lines.
//! Which one a request means is a [`CartOf`].
//!
//! - At a login the guest's lines join the account's cart
//!   ([`Carts::merge_into_account`]: quantities added per item, within the caps;
//!   a line past the cap of lines is left out), once per session: the login
//!   moved the guest's cart to the new token in the same script that rotated the
//!   token, and the merge is remembered by that token and its lines, so a
//!   retried or racing login adds nothing twice; each merged line then leaves the
//!   session's cart if it is still as read. A merge cut short (Redis failing
//!   between its steps), or put off while a checkout holds the account's cart,
//!   is finished at the session's next cart read.
//! - Logout, "log out everywhere", a password change and the session lifetimes
//!   end sessions, not the account's cart: it lives until left untouched for
//!   [`DEFAULT_ACCOUNT_CART_TTL`] (a setting), renewed by every change.
//!
//! Setting a quantity above zero stores it (overwriting), zero or below removes the
//! line, as in the book; adding one ([`Carts::add`], an item page's "Add to cart")
//! adds it to the line's, refused (nothing written) when the sum would pass the
//! maximum; a quantity above the shop's maximum is refused before
//! anything is written, and so is a new line for a cart that already has
//! [`DEFAULT_MAX_LINES`] (configurable) lines: without that cap one session could
//! hold a line per catalogue item (100,000), and every page that lists the cart
//! would look them all up.

use crate::RedisConn;

use crate::domain::{InvalidInput, ItemId, SessionToken, UserId};
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// The default most of one item a cart may hold.
pub const DEFAULT_MAX_QUANTITY: u32 = 99;
/// The default most lines (different items) a cart may hold.
pub const DEFAULT_MAX_LINES: u32 = 50;

/// How long an account's cart lives untouched by default: 90 days.
pub const DEFAULT_ACCOUNT_CART_TTL: std::time::Duration =
    std::time::Duration::from_secs(90 * 24 * 3600);

/// How long an account's record of the orders whose lines left its cart
/// ([`Carts::take_order`]) is kept after the last: far longer than the
/// database can be away while the shop still places orders.
pub const CART_TAKES_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

/// The most orders that record keeps (the newest).
pub const CART_TAKES_KEPT: u32 = 1_000;

/// How long a merge is remembered: as long as a login lasts (90 days), so the
/// leftover of a merge whose last step failed is never merged twice.
const MERGE_MEMORY_SECS: u64 = 90 * 24 * 3600;

/// The most merges remembered per user (the newest), so logins cannot grow the
/// record without bound.
const MERGES_REMEMBERED: u64 = 1_000;

/// Whose cart a request means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CartOf {
    /// A visitor not logged in: the browser session's cart, as in the book.
    Session(SessionToken),
    /// A logged-in user: the account's cart, shared by all their sessions.
    Account(UserId),
}

impl CartOf {
    /// The cart of a request by session `token`, logged in as `user` (if any).
    pub fn of(token: &SessionToken, user: Option<UserId>) -> Self {
        match user {
            Some(user) => CartOf::Account(user),
            None => CartOf::Session(token.clone()),
        }
    }

    /// The token the cart scripts keep a session's bookkeeping by ('' for an
    /// account's cart, which has none).
    fn script_token(&self) -> &str {
        match self {
            CartOf::Session(token) => token.expose(),
            CartOf::Account(_) => "",
        }
    }
}

impl From<&SessionToken> for CartOf {
    fn from(token: &SessionToken) -> Self {
        CartOf::Session(token.clone())
    }
}

/// A quantity in a cart line: 1 ..= the shop's maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(u32);

impl Quantity {
    /// The number of units.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// What a requested count means for a cart line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineChange {
    /// Store this quantity, replacing any previous one.
    Set(Quantity),
    /// Remove the line.
    Remove,
}

impl LineChange {
    /// Interprets a requested count against `max`: `<= 0` removes, `1..=max` sets,
    /// above `max` is refused.
    pub fn from_count(count: i64, max: u32) -> Result<Self, InvalidInput> {
        if count <= 0 {
            Ok(LineChange::Remove)
        } else if count <= i64::from(max) {
            // In range 1..=max, which fits a u32.
            Ok(LineChange::Set(Quantity(count as u32)))
        } else {
            Err(InvalidInput::QuantityTooLarge { max })
        }
    }
}

/// What a guest's cart merged into an account's did not fit (nothing when it
/// was merged before, or put off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Merged {
    /// Lines left out: the account's cart held the most lines.
    pub left_out: u64,
    /// Units cut: the sum of a line's quantities passed the most of one item.
    pub cut: u64,
}

/// Cart operations over one Redis. Clone it freely: the connection is shared.
#[derive(Clone)]
pub struct Carts {
    conn: RedisConn,
    keys: Keys,
    max_quantity: u32,
    max_lines: u32,
    account_ttl: std::time::Duration,
}

/// How long a checkout may hold its cart: well past the longest a checkout's
/// database write waits before it gives up (about 3 s), so a hold never ends
/// under a checkout still running, and short enough that a server dying
/// mid-checkout holds the cart only briefly.
pub const CHECKOUT_HOLD: std::time::Duration = std::time::Duration::from_secs(30);

/// A checkout's hold on a cart ([`Carts::hold_for_checkout`]).
pub type CartHold = crate::lock::Lock;

impl Carts {
    /// Carts stored under `keys`, with at most `max_quantity` of one item per line
    /// and [`DEFAULT_MAX_LINES`] lines (see [`Carts::with_max_lines`]).
    pub fn new(conn: RedisConn, keys: Keys, max_quantity: u32) -> Self {
        Self {
            conn,
            keys,
            max_quantity,
            max_lines: DEFAULT_MAX_LINES,
            account_ttl: DEFAULT_ACCOUNT_CART_TTL,
        }
    }

    /// The same carts, an account's living `ttl` untouched (at least a second).
    pub fn with_account_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.account_ttl = ttl.max(std::time::Duration::from_secs(1));
        self
    }

    /// The key of `cart`.
    fn key(&self, cart: &CartOf) -> String {
        match cart {
            CartOf::Session(token) => self.keys.cart(token),
            CartOf::Account(user) => self.keys.user_cart(*user),
        }
    }

    /// A script call on `cart`: its key, and for a session's cart the session
    /// bookkeeping keys after it (see the cart scripts).
    fn invoke<'a>(&self, script: &'a redis::Script, cart: &CartOf) -> redis::ScriptInvocation<'a> {
        let mut call = script.key(self.key(cart));
        if let CartOf::Session(token) = cart {
            call.key(self.keys.recent_of(token))
                .key(self.keys.guests_of(token))
                .key(self.keys.login_of(token))
                .key(self.keys.anonymous_of(token));
        }
        call
    }

    /// The same carts with at most `max_lines` lines each (at least one).
    pub fn with_max_lines(mut self, max_lines: u32) -> Self {
        self.max_lines = max_lines.max(1);
        self
    }

    /// The most lines a cart may hold.
    pub fn max_lines(&self) -> u32 {
        self.max_lines
    }

    /// The most of one item a line may hold.
    pub fn max_quantity(&self) -> u32 {
        self.max_quantity
    }

    /// Sets the quantity of `item` in `cart` (`count <= 0` removes it). Returns
    /// what was done. A count above the maximum, or a new line for a full cart,
    /// writes nothing. A stored line in a session's cart makes the session a
    /// shopper's (out of the guests the cleaner removes first) and starts it if it
    /// had not started yet (sessions start lazily: see [`crate::session`]); one in
    /// an account's cart renews its lifetime.
    pub async fn set(
        &self,
        cart: impl Into<CartOf>,
        item: ItemId,
        count: i64,
    ) -> Result<LineChange, CacheError> {
        let cart = cart.into();
        let change = LineChange::from_count(count, self.max_quantity)?;
        match change {
            LineChange::Set(q) => {
                self.store(&cart, item, q, false).await?;
            }
            LineChange::Remove => {
                self.invoke(&scripts::CART_REMOVE, &cart)
                    .arg(item)
                    .arg(cart.script_token())
                    .invoke_async::<()>(&mut self.conn.clone())
                    .await?
            }
        }
        Ok(change)
    }

    /// Adds `count` units of `item` to `cart` (a new line if it has none), as
    /// an item page's "Add to cart" means. Returns the line's quantity now.
    /// A count below 1 or above the maximum, a sum above the maximum
    /// ([`InvalidInput::LineFull`]), or a new line for a full cart writes
    /// nothing. Starts and renews as [`Carts::set`] does.
    pub async fn add(
        &self,
        cart: impl Into<CartOf>,
        item: ItemId,
        count: i64,
    ) -> Result<Quantity, CacheError> {
        let LineChange::Set(q) = LineChange::from_count(count, self.max_quantity)? else {
            return Err(InvalidInput::QuantityTooSmall.into());
        };
        self.store(&cart.into(), item, q, true).await
    }

    /// One call of the line script: set the line to `q`, or add `q` to it.
    async fn store(
        &self,
        cart: &CartOf,
        item: ItemId,
        q: Quantity,
        add: bool,
    ) -> Result<Quantity, CacheError> {
        let stored: i64 = self
            .invoke(&scripts::CART_SET, cart)
            .arg(item)
            .arg(q.get())
            .arg(self.max_lines)
            .arg(cart.script_token())
            .arg(self.account_ttl.as_secs())
            .arg(if add {
                self.max_quantity.to_string()
            } else {
                String::new()
            })
            .invoke_async(&mut self.conn.clone())
            .await?;
        match u32::try_from(stored) {
            Ok(0) => Err(InvalidInput::CartFull {
                max: self.max_lines,
            }
            .into()),
            Ok(quantity) => Ok(Quantity(quantity)),
            Err(_) => Err(InvalidInput::LineFull {
                has: u32::try_from(-1 - stored).unwrap_or(u32::MAX),
                max: self.max_quantity,
            }
            .into()),
        }
    }

    /// Whether a checkout holds `cart` now (a read: nothing is taken).
    pub async fn held_for_checkout(&self, cart: impl Into<CartOf>) -> Result<bool, CacheError> {
        Ok(redis::cmd("EXISTS")
            .arg(self.hold_key(cart.into()))
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// Holds `cart` for one checkout: `None` if another checkout holds it now.
    /// Held until [`Carts::release`], or [`CHECKOUT_HOLD`] at most.
    pub async fn hold_for_checkout(
        &self,
        cart: impl Into<CartOf>,
    ) -> Result<Option<CartHold>, CacheError> {
        crate::lock::take(&self.conn, self.hold_key(cart.into()), CHECKOUT_HOLD).await
    }

    /// The key of `cart`'s checkout hold.
    fn hold_key(&self, cart: CartOf) -> String {
        match cart {
            CartOf::Session(token) => self.keys.checkout_hold(&token),
            CartOf::Account(user) => self.keys.user_checkout_hold(user),
        }
    }

    /// Lets the cart go after its checkout (unless the hold expired and another
    /// checkout holds it now).
    pub async fn release(&self, hold: CartHold) -> Result<(), CacheError> {
        crate::lock::release(&self.conn, hold).await
    }

    /// Removes from `cart` the lines an order took (after checkout), atomically:
    /// each line whose quantity is still the one ordered. A line added or changed
    /// since the order read the cart stays. Returns how many it removed.
    pub async fn take(
        &self,
        cart: impl Into<CartOf>,
        ordered: &[(ItemId, u32)],
    ) -> Result<u64, CacheError> {
        let cart = cart.into();
        let mut call = self.invoke(&scripts::CART_TAKE, &cart);
        call.arg(cart.script_token());
        for (item, quantity) in ordered {
            call.arg(*item).arg(*quantity);
        }
        Ok(call.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Removes from `user`'s cart the lines order `order_id`, placed at
    /// `placed_at`, took (`ordered`), as [`Carts::take`] does, once per order:
    /// a take of an order taken before removes nothing and answers `None`. So
    /// an order whose take is done again (its answer was lost, or the database
    /// was not told) never takes a line the shopper has added since. An order
    /// is known by its id and its time together: a database restored from an
    /// older copy gives ids again, to other orders (a take an earlier release
    /// recorded by the id alone is this order's if made at or after
    /// `placed_at`). `now`: unix seconds.
    pub async fn take_order(
        &self,
        user: UserId,
        (order_id, placed_at): (i64, i64),
        ordered: &[(ItemId, u32)],
        now: i64,
    ) -> Result<Option<u64>, CacheError> {
        let mut call = scripts::CART_TAKE_ORDER.key(self.keys.user_cart(user));
        call.key(self.keys.user_cart_takes(user))
            .arg(format!("{order_id}@{placed_at}"))
            .arg(now)
            .arg(CART_TAKES_KEPT_FOR.as_secs())
            .arg(CART_TAKES_KEPT);
        for (item, quantity) in ordered {
            call.arg(*item).arg(*quantity);
        }
        let removed: i64 = call.invoke_async(&mut self.conn.clone()).await?;
        Ok(u64::try_from(removed).ok())
    }

    /// Whether `cart` holds no line.
    pub async fn is_empty(&self, cart: impl Into<CartOf>) -> Result<bool, CacheError> {
        let exists: bool = redis::cmd("EXISTS")
            .arg(self.key(&cart.into()))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(!exists)
    }

    /// The lines of `cart`, ordered by item id.
    pub async fn get(
        &self,
        cart: impl Into<CartOf>,
    ) -> Result<Vec<(ItemId, Quantity)>, CacheError> {
        let raw: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.key(&cart.into()))
            .query_async(&mut self.conn.clone())
            .await?;
        lines(raw)
    }

    /// Merges the cart of session `token` (logged in as `user`: a login moved
    /// the guest's cart to it) into the user's cart, see [`Carts::merge_lines`]:
    /// once per session and lines, a second call adds nothing. Returns what did
    /// not fit the account's cart.
    pub async fn merge_into_account(
        &self,
        token: &SessionToken,
        user: UserId,
    ) -> Result<Merged, CacheError> {
        let lines = self.get(token).await?;
        if lines.is_empty() {
            return Ok(Merged::default());
        }
        self.merge_lines(token, user, &lines).await
    }

    /// Merges the carts of the sessions logged in before carts were the
    /// accounts' (one per session then) into their users' carts, each once
    /// (`shop migrate`; safe to run again, and while the shop runs: a session's
    /// next cart read would merge it too). Returns how many sessions' carts it
    /// merged.
    pub async fn move_logged_in_carts(&self) -> Result<u64, CacheError> {
        let mut conn = self.conn.clone();
        let mut merged = 0;
        for shard in self.keys.shards() {
            let mut cursor = 0u64;
            loop {
                let (next, page) =
                    crate::session::logins_page(&mut conn, &self.keys, shard, cursor).await?;
                let mut exists = redis::pipe();
                for (token, _) in &page {
                    exists.exists(self.keys.cart(token));
                }
                let held: Vec<bool> = match page.is_empty() {
                    true => Vec::new(),
                    false => exists.query_async(&mut conn).await?,
                };
                for ((token, user), held) in page.iter().zip(held) {
                    if held {
                        self.merge_into_account(token, *user).await?;
                        merged += 1;
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(merged)
    }

    /// [`Carts::merge_into_account`] of lines already read. While a checkout
    /// holds the account's cart nothing is merged (its order would leave the
    /// added units behind): the lines wait in the session's cart for its next
    /// cart read.
    pub async fn merge_lines(
        &self,
        token: &SessionToken,
        user: UserId,
        lines: &[(ItemId, Quantity)],
    ) -> Result<Merged, CacheError> {
        let mut call = scripts::CART_MERGE.key(self.keys.user_cart(user));
        call.key(self.keys.user_cart_merges(user))
            .key(self.keys.user_checkout_hold(user))
            .arg(merge_id(token, lines))
            .arg(self.max_quantity)
            .arg(self.max_lines)
            .arg(self.account_ttl.as_secs())
            .arg(MERGE_MEMORY_SECS)
            .arg(MERGES_REMEMBERED);
        for (item, quantity) in lines {
            call.arg(*item).arg(quantity.get());
        }
        let (state, left_out, cut): (i64, u64, u64) =
            call.invoke_async(&mut self.conn.clone()).await?;
        if state == -2 {
            return Ok(Merged::default());
        }
        // Merged (now or before): the lines merged leave the session's cart, each
        // only if it is still as read (another session's slot on a cluster, so a
        // step of its own); a line written meanwhile stays, for the next merge.
        let merged: Vec<(ItemId, u32)> = lines.iter().map(|(id, q)| (*id, q.get())).collect();
        self.take(token, &merged).await?;
        Ok(Merged { left_out, cut })
    }
}

/// What a merge is remembered by: the session's token and a digest of the lines
/// merged (FNV-1a, the same in every build), so the same merge retried adds
/// nothing, and lines the session's cart holds later (an older build's write
/// during an upgrade) are merged in their turn.
fn merge_id(token: &SessionToken, lines: &[(ItemId, Quantity)]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (item, quantity) in lines {
        for byte in format!("{}x{};", item.get(), quantity.get()).bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{}:{hash:016x}", token.expose())
}

/// A cart's lines from its hash's fields and values, sorted by item.
pub(crate) fn lines(
    raw: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(ItemId, Quantity)>, CacheError> {
    let corrupt = || CacheError::Corrupt { what: "cart" };
    let mut lines = raw
        .into_iter()
        .map(|(item, qty)| {
            let item: ItemId = item.parse().map_err(|_| corrupt())?;
            let qty: u32 = qty.parse().map_err(|_| corrupt())?;
            if qty == 0 {
                return Err(corrupt());
            }
            Ok((item, Quantity(qty)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    lines.sort_unstable();
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_map_to_changes() {
        assert_eq!(LineChange::from_count(0, 99), Ok(LineChange::Remove));
        assert_eq!(LineChange::from_count(-5, 99), Ok(LineChange::Remove));
        assert_eq!(LineChange::from_count(i64::MIN, 99), Ok(LineChange::Remove));
        assert_eq!(
            LineChange::from_count(1, 99),
            Ok(LineChange::Set(Quantity(1)))
        );
        assert_eq!(
            LineChange::from_count(99, 99),
            Ok(LineChange::Set(Quantity(99)))
        );
        assert_eq!(
            LineChange::from_count(100, 99),
            Err(InvalidInput::QuantityTooLarge { max: 99 })
        );
        assert_eq!(
            LineChange::from_count(i64::MAX, 99),
            Err(InvalidInput::QuantityTooLarge { max: 99 })
        );
    }
}
