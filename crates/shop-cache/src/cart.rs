//! Shopping carts: `cart:<token>`, a hash of item id -> quantity, one per session.
//!
//! Setting a quantity above zero stores it (overwriting), zero or below removes the
//! line, as in the book; a quantity above the shop's maximum is refused before
//! anything is written, and so is a new line for a cart that already has
//! [`DEFAULT_MAX_LINES`] (configurable) lines: without that cap one session could
//! hold a line per catalogue item (100,000), and every page that lists the cart
//! would look them all up.

use crate::RedisConn;

use crate::domain::{InvalidInput, ItemId, SessionToken};
use crate::keys::Keys;
use crate::{CacheError, scripts};

/// The default most of one item a cart may hold.
pub const DEFAULT_MAX_QUANTITY: u32 = 99;
/// The default most lines (different items) a cart may hold.
pub const DEFAULT_MAX_LINES: u32 = 50;

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

/// Cart operations over one Redis. Clone it freely: the connection is shared.
#[derive(Clone)]
pub struct Carts {
    conn: RedisConn,
    keys: Keys,
    max_quantity: u32,
    max_lines: u32,
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
        }
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

    /// Sets the quantity of `item` in the session's cart (`count <= 0` removes it).
    /// Returns what was done. A count above the maximum, or a new line for a full
    /// cart, writes nothing. A stored line makes the session a shopper's (out of the
    /// guests the cleaner removes first) and starts it if it had not started yet
    /// (sessions start lazily: see [`crate::session`]).
    pub async fn set(
        &self,
        token: &SessionToken,
        item: ItemId,
        count: i64,
    ) -> Result<LineChange, CacheError> {
        let change = LineChange::from_count(count, self.max_quantity)?;
        let key = self.keys.cart(token);
        let mut conn = self.conn.clone();
        match change {
            LineChange::Set(q) => {
                let stored: i64 = scripts::CART_SET
                    .key(&key)
                    .key(self.keys.recent_of(token))
                    .key(self.keys.guests_of(token))
                    .key(self.keys.login_of(token))
                    .key(self.keys.anonymous_of(token))
                    .arg(item)
                    .arg(q.get())
                    .arg(self.max_lines)
                    .arg(token.expose())
                    .invoke_async(&mut conn)
                    .await?;
                if stored == 0 {
                    return Err(InvalidInput::CartFull {
                        max: self.max_lines,
                    }
                    .into());
                }
            }
            LineChange::Remove => {
                scripts::CART_REMOVE
                    .key(&key)
                    .key(self.keys.recent_of(token))
                    .key(self.keys.guests_of(token))
                    .key(self.keys.login_of(token))
                    .key(self.keys.anonymous_of(token))
                    .arg(item)
                    .arg(token.expose())
                    .invoke_async::<()>(&mut conn)
                    .await?
            }
        }
        Ok(change)
    }

    /// Holds the session's cart for one checkout: `None` if another checkout
    /// holds it now. Held until [`Carts::release`], or [`CHECKOUT_HOLD`] at most.
    pub async fn hold_for_checkout(
        &self,
        token: &SessionToken,
    ) -> Result<Option<CartHold>, CacheError> {
        crate::lock::take(&self.conn, self.keys.checkout_hold(token), CHECKOUT_HOLD).await
    }

    /// Lets the cart go after its checkout (unless the hold expired and another
    /// checkout holds it now).
    pub async fn release(&self, hold: CartHold) -> Result<(), CacheError> {
        crate::lock::release(&self.conn, hold).await
    }

    /// Removes from the session's cart the lines an order took (after checkout),
    /// atomically: each line whose quantity is still the one ordered. A line added
    /// or changed since the order read the cart stays. Returns how many it removed.
    pub async fn take(
        &self,
        token: &SessionToken,
        ordered: &[(ItemId, u32)],
    ) -> Result<u64, CacheError> {
        let mut call = scripts::CART_TAKE.key(self.keys.cart(token));
        call.key(self.keys.recent_of(token))
            .key(self.keys.guests_of(token))
            .key(self.keys.login_of(token))
            .key(self.keys.anonymous_of(token))
            .arg(token.expose());
        for (item, quantity) in ordered {
            call.arg(*item).arg(*quantity);
        }
        Ok(call.invoke_async(&mut self.conn.clone()).await?)
    }

    /// Whether the session's cart holds no line.
    pub async fn is_empty(&self, token: &SessionToken) -> Result<bool, CacheError> {
        let exists: bool = redis::cmd("EXISTS")
            .arg(self.keys.cart(token))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(!exists)
    }

    /// The session's cart lines, ordered by item id.
    pub async fn get(&self, token: &SessionToken) -> Result<Vec<(ItemId, Quantity)>, CacheError> {
        let raw: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.keys.cart(token))
            .query_async(&mut self.conn.clone())
            .await?;
        lines(raw)
    }
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
