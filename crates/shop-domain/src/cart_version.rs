//! What a cart page showed, so a checkout can confirm it: the cart's lines, their
//! quantities and the unit prices shown, as one text (`cart_version`) that the
//! page's checkout form carries back.
//!
//! The text is the content itself (`5:2:56335;7:1:1299`: item, quantity, price in
//! cents; a line of an item no longer sold has `-` for its price), not a hash, so
//! the server can say what changed since the page ("the price went up from $5.63
//! to $9.99") and an API client can read what it is asked to confirm. A forged
//! text gains nothing: an order is placed only when the text equals the version
//! the cart and the database's prices have at the order's commit.

use std::fmt;

use serde::Serialize;

use crate::ItemId;

/// The most lines a version may name (well above any cart's line cap): a longer
/// text from a client is refused without being read further.
const MAX_LINES: usize = 1_000;

/// One line as a page shows it: the item, its quantity, and its unit price in
/// cents (`None`: the item is no longer sold, shown and not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShownLine {
    /// The item.
    pub item: ItemId,
    /// How many.
    pub quantity: u32,
    /// Unit price in cents, `None` for an item no longer sold.
    pub price_cents: Option<i64>,
}

/// A cart as shown: its lines in item order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CartVersion {
    lines: Vec<ShownLine>,
}

/// The `cart_version` a client sent is not one this shop writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cart_version is not a version this shop wrote; reload the cart")]
pub struct BadCartVersion;

/// One difference between what a page showed and the cart now (serialized as the
/// checkout's JSON answer names it: `{"item":5,"was_cents":56335,"now_cents":999999}`,
/// `{"item":7,"added":true,...}`, `{"item":8,"removed":true}`,
/// `{"item":9,"retired":true}`, `{"item":6,"out_of_stock":true,"in_stock":1}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CartChange {
    /// The item.
    pub item: ItemId,
    /// The unit price shown, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub was_cents: Option<i64>,
    /// The unit price now, when it changed or the line is new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub now_cents: Option<i64>,
    /// The quantity shown, when it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub was_quantity: Option<u32>,
    /// The quantity now, when it changed or the line is new.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub now_quantity: Option<u32>,
    /// The line was not on the page.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub added: bool,
    /// The line was on the page and is no longer in the cart.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// The item was for sale on the page and is no longer sold.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
    /// Not enough of the item is left for the line's quantity ([`Self::in_stock`]
    /// is how many are).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub out_of_stock: bool,
    /// How many are left, when not enough are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_stock: Option<i64>,
}

impl CartChange {
    /// Not enough of `item` left for its line: `in_stock` are.
    pub fn out_of_stock(item: ItemId, in_stock: i64) -> Self {
        Self {
            out_of_stock: true,
            in_stock: Some(in_stock),
            ..Self::of(item)
        }
    }

    fn of(item: ItemId) -> Self {
        Self {
            item,
            was_cents: None,
            now_cents: None,
            was_quantity: None,
            now_quantity: None,
            added: false,
            removed: false,
            retired: false,
            out_of_stock: false,
            in_stock: None,
        }
    }
}

impl CartVersion {
    /// The version of `lines` (any order; one line per item).
    pub fn new(mut lines: Vec<ShownLine>) -> Self {
        lines.sort_unstable_by_key(|line| line.item);
        Self { lines }
    }

    /// Its lines, in item order.
    pub fn lines(&self) -> &[ShownLine] {
        &self.lines
    }

    /// Reads a version a client sent back.
    pub fn parse(text: &str) -> Result<Self, BadCartVersion> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self::default());
        }
        let mut lines = Vec::new();
        for part in text.split(';') {
            if lines.len() == MAX_LINES {
                return Err(BadCartVersion);
            }
            let mut fields = part.split(':');
            let (Some(item), Some(quantity), Some(price), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(BadCartVersion);
            };
            let item: ItemId = item.parse().map_err(|_| BadCartVersion)?;
            let quantity: u32 = quantity.parse().map_err(|_| BadCartVersion)?;
            let price_cents = match price {
                "-" => None,
                cents => Some(cents.parse::<i64>().map_err(|_| BadCartVersion)?),
            };
            if quantity == 0 || price_cents.is_some_and(|p| p < 0) {
                return Err(BadCartVersion);
            }
            lines.push(ShownLine {
                item,
                quantity,
                price_cents,
            });
        }
        let version = Self::new(lines);
        let distinct = version.lines.windows(2).all(|w| w[0].item != w[1].item);
        if !distinct {
            return Err(BadCartVersion);
        }
        Ok(version)
    }

    /// What differs in `now` from this version (the one a page showed), one entry
    /// per line that differs, in item order; empty when they are the same.
    pub fn changes_to(&self, now: &CartVersion) -> Vec<CartChange> {
        let mut changes = Vec::new();
        let (mut shown, mut current) = (self.lines.iter().peekable(), now.lines.iter().peekable());
        loop {
            match (shown.peek(), current.peek()) {
                (None, None) => break,
                (Some(was), Some(is)) if was.item == is.item => {
                    let mut change = CartChange::of(is.item);
                    if was.price_cents.is_some() && is.price_cents.is_none() {
                        change.retired = true;
                    } else if was.price_cents != is.price_cents {
                        change.was_cents = was.price_cents;
                        change.now_cents = is.price_cents;
                    }
                    if was.quantity != is.quantity {
                        change.was_quantity = Some(was.quantity);
                        change.now_quantity = Some(is.quantity);
                    }
                    if change != CartChange::of(is.item) {
                        changes.push(change);
                    }
                    shown.next();
                    current.next();
                }
                (Some(was), is) if is.is_none_or(|is| was.item < is.item) => {
                    changes.push(CartChange {
                        removed: true,
                        ..CartChange::of(was.item)
                    });
                    shown.next();
                }
                (_, Some(is)) => {
                    changes.push(CartChange {
                        added: true,
                        now_cents: is.price_cents,
                        now_quantity: Some(is.quantity),
                        retired: is.price_cents.is_none(),
                        ..CartChange::of(is.item)
                    });
                    current.next();
                }
                (Some(_), None) => unreachable!("matched by the arm above"),
            }
        }
        changes
    }
}

impl fmt::Display for CartVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, line) in self.lines.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{}:{}:", line.item, line.quantity)?;
            match line.price_cents {
                Some(cents) => write!(f, "{cents}")?,
                None => f.write_str("-")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(item: u64, quantity: u32, price: Option<i64>) -> ShownLine {
        ShownLine {
            item: ItemId::new(item).unwrap(),
            quantity,
            price_cents: price,
        }
    }

    #[test]
    fn a_version_reads_back_as_written_in_item_order() {
        let version = CartVersion::new(vec![line(7, 1, Some(1299)), line(5, 2, Some(56335))]);
        assert_eq!(version.to_string(), "5:2:56335;7:1:1299");
        assert_eq!(CartVersion::parse("5:2:56335;7:1:1299"), Ok(version));
        let retired = CartVersion::new(vec![line(9, 3, None)]);
        assert_eq!(retired.to_string(), "9:3:-");
        assert_eq!(CartVersion::parse("9:3:-"), Ok(retired));
        assert_eq!(CartVersion::parse(""), Ok(CartVersion::default()));
    }

    #[test]
    fn a_text_this_shop_never_writes_is_refused() {
        for bad in [
            "5",
            "5:2",
            "5:2:1:4",
            "x:2:1",
            "0:2:1",
            "5:0:1",
            "5:-1:1",
            "5:2:-3",
            "5:2:x",
            "5:2:1;5:3:1",
            "5:2:1;",
            ";",
        ] {
            assert_eq!(CartVersion::parse(bad), Err(BadCartVersion), "{bad:?}");
        }
        let long = vec!["1:1:1"; MAX_LINES + 1].join(";");
        assert_eq!(CartVersion::parse(&long), Err(BadCartVersion));
    }

    #[test]
    fn changes_name_each_line_that_differs() {
        let shown = CartVersion::new(vec![
            line(5, 2, Some(56335)),
            line(6, 1, Some(100)),
            line(8, 1, Some(700)),
            line(9, 1, Some(900)),
        ]);
        let now = CartVersion::new(vec![
            line(5, 2, Some(999999)),
            line(6, 3, Some(100)),
            line(7, 1, Some(1299)),
            line(9, 1, None),
        ]);
        let json = serde_json::to_string(&shown.changes_to(&now)).unwrap();
        assert_eq!(
            json,
            r#"[{"item":5,"was_cents":56335,"now_cents":999999},{"item":6,"was_quantity":1,"now_quantity":3},{"item":7,"now_cents":1299,"now_quantity":1,"added":true},{"item":8,"removed":true},{"item":9,"retired":true}]"#
        );
        assert!(shown.changes_to(&shown).is_empty());
        assert_eq!(
            CartVersion::default().changes_to(&now).len(),
            now.lines().len(),
            "a page that showed nothing: every line is new"
        );
    }

    proptest! {
        #[test]
        fn any_cart_reads_back_and_differs_only_where_it_does(
            lines in proptest::collection::btree_map(1u64..50, (1u32..100, proptest::option::of(0i64..1_000_000)), 0..20),
            other in proptest::collection::btree_map(1u64..50, (1u32..100, proptest::option::of(0i64..1_000_000)), 0..20),
        ) {
            let make = |m: &std::collections::BTreeMap<u64, (u32, Option<i64>)>| {
                CartVersion::new(m.iter().map(|(&i, &(q, p))| line(i, q, p)).collect())
            };
            let (a, b) = (make(&lines), make(&other));
            prop_assert_eq!(CartVersion::parse(&a.to_string()), Ok(a.clone()));
            prop_assert_eq!(a.changes_to(&b).is_empty(), a == b);
        }
    }
}
