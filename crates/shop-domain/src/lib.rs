//! Identifiers that arrive from outside (URLs, forms, cookies) parsed once into types
//! that cannot hold a bad value, so everything past the boundary can trust them.
//! Shared by the Redis layer (`shop-cache`) and the SQL layer (`shop-db`), which do
//! not depend on each other.

use std::fmt;
use std::str::FromStr;

pub mod account;
pub mod cart_version;
pub mod catalogue;
pub mod client;
mod flash;
mod token;
pub mod when;

pub use flash::BuyOutcome;
pub use token::SessionToken;

/// Why a value from outside was refused. The text is safe to show to a user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    /// Not a positive decimal integer within range.
    #[error("item id must be a whole number from 1 to 999999999999999999")]
    ItemId,
    /// Not a positive decimal integer within range.
    #[error("user id must be a whole number from 1 to 999999999999999999")]
    UserId,
    /// Not a token this shop issued (wrong length or alphabet).
    #[error("malformed session token")]
    SessionToken,
    /// A cart quantity above the configured maximum.
    #[error("quantity must be at most {max}")]
    QuantityTooLarge {
        /// The configured maximum.
        max: u32,
    },
    /// A quantity to add below 1.
    #[error("count must be at least 1 to add to the cart")]
    QuantityTooSmall,
    /// A quantity to add that would take a cart line above the maximum.
    #[error("{}", line_full(*.has, *.max))]
    LineFull {
        /// What the line holds.
        has: u32,
        /// The configured maximum.
        max: u32,
    },
    /// A new account's name breaks the naming rules ([`account`]).
    #[error(
        "a name is 3 to 32 characters: lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
    )]
    UserName,
    /// A new account's password is too short or too long ([`account`]).
    #[error(
        "a password is at least 10 characters and at most 200 bytes, and not one character repeated (such as ten spaces)"
    )]
    Password,
    /// A new line for a cart that already holds the most lines allowed.
    #[error("a cart holds at most {max} different items; remove one first")]
    CartFull {
        /// The configured maximum.
        max: u32,
    },
    /// An item's title breaks its rule ([`catalogue::title`]).
    #[error("a title is 1 to 200 characters, without control or direction-override characters")]
    Title,
    /// An item's description breaks its rule ([`catalogue::description`]).
    #[error(
        "a description is at most 10,000 characters, without control or direction-override characters"
    )]
    Description,
    /// A price out of range ([`catalogue::price_cents`]).
    #[error("a price is a whole number of cents from 0 to 1,000,000,000")]
    Price,
    /// A department name breaks its rule ([`catalogue::category`]).
    #[error(
        "a department is 1 to 100 characters, without '/', control or direction-override characters, and not '.' or '..'"
    )]
    Category,
    /// A flash sale's terms out of range (`shop_app::sale::start`).
    #[error(
        "a sale lasts 1 to 527,040 minutes (366 days), within that of now, of 0 to 1,000,000,000 units, at 0 to 1,000,000,000 cents, its row refreshed every 0.1 to 86,400 seconds"
    )]
    SaleTerms,
}

/// What [`InvalidInput::LineFull`] says: how many more fit, if any.
fn line_full(has: u32, max: u32) -> String {
    match max.saturating_sub(has) {
        0 => format!("your cart holds {has} of this item, the most a line holds ({max})"),
        more => format!(
            "your cart holds {has} of this item and a line holds at most {max}: you can add {more} more"
        ),
    }
}

/// Parses a strictly positive decimal id: ASCII digits only, no sign, no leading zero,
/// at most 18 digits (so it always fits an `i64` column in the database).
fn parse_positive_id(s: &str) -> Option<u64> {
    let ok = !s.is_empty()
        && s.len() <= 18
        && s.bytes().all(|b| b.is_ascii_digit())
        && !s.starts_with('0');
    if ok { s.parse().ok() } else { None }
}

macro_rules! positive_id {
    ($(#[$doc:meta])* $name:ident, $err:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u64);

        impl $name {
            /// The largest id accepted: 18 decimal digits.
            pub const MAX: u64 = 999_999_999_999_999_999;

            /// Accepts 1..=MAX.
            pub fn new(value: u64) -> Result<Self, InvalidInput> {
                if (1..=Self::MAX).contains(&value) {
                    Ok(Self(value))
                } else {
                    Err(InvalidInput::$err)
                }
            }

            /// The number, for SQL parameters and arithmetic.
            pub fn get(self) -> u64 {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = InvalidInput;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                parse_positive_id(s).map(Self).ok_or(InvalidInput::$err)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        #[cfg(feature = "redis")]
        impl redis::ToRedisArgs for $name {
            fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
                self.0.write_redis_args(out)
            }
        }

        #[cfg(feature = "redis")]
        impl redis::ToSingleRedisArg for $name {}

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_u64(self.0)
            }
        }

        impl $name {
            /// The id as a SQL `BIGINT` parameter (always in range: at most 18 digits).
            pub fn to_i64(self) -> i64 {
                self.0 as i64
            }

            /// Reads an id from a SQL `BIGINT` column.
            pub fn from_i64(value: i64) -> Result<Self, InvalidInput> {
                u64::try_from(value).map_err(|_| InvalidInput::$err).and_then(Self::new)
            }
        }
    };
}

positive_id!(
    /// A catalogue item. Also the row id of the row cache and a member of `viewed:`.
    ItemId,
    ItemId
);
positive_id!(
    /// A registered user, as stored in `login:`.
    UserId,
    UserId
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_accept_plain_positive_numbers() {
        assert_eq!("1".parse::<ItemId>().unwrap().get(), 1);
        assert_eq!("100000".parse::<ItemId>().unwrap().get(), 100_000);
        assert_eq!(
            "999999999999999999".parse::<UserId>().unwrap().get(),
            ItemId::MAX
        );
    }

    #[test]
    fn ids_reject_everything_else() {
        for bad in [
            "",
            "0",
            "01",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1.0",
            "abc",
            "1e3",
            "1000000000000000000",
            "１",
        ] {
            assert_eq!(bad.parse::<ItemId>(), Err(InvalidInput::ItemId), "{bad:?}");
        }
        assert_eq!(ItemId::new(0), Err(InvalidInput::ItemId));
        assert_eq!(UserId::new(ItemId::MAX + 1), Err(InvalidInput::UserId));
    }

    proptest! {
        #[test]
        fn id_display_round_trips(n in 1..=ItemId::MAX) {
            let id = ItemId::new(n).unwrap();
            prop_assert_eq!(id.to_string().parse::<ItemId>().unwrap(), id);
        }

        #[test]
        fn id_parse_never_panics_and_only_accepts_canonical(s in "\\PC{0,24}") {
            if let Ok(id) = s.parse::<ItemId>() {
                prop_assert_eq!(id.to_string(), s);
            }
        }
    }
}
