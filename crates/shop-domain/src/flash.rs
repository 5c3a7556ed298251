//! The answer to a flash-sale purchase, shared by the two places that can decide it:
//! Redis (the sale's reservation script, `shop-cache`) and the database (the
//! database-decided design kept for comparison, and the order that records a win,
//! `shop-db`). Its short code is what both store as a remembered answer (of a unit
//! bought, or one whose order never came), so a retry with the same idempotency
//! key gets the same answer from either; a refusal is not stored, and a retry of
//! it is decided again.

use serde::Serialize;

/// The answer to a purchase attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum BuyOutcome {
    /// Bought one unit; the order is in the database.
    Bought {
        /// The new order.
        order_id: i64,
    },
    /// No stock left.
    SoldOut,
    /// The user already bought the most allowed.
    LimitReached,
    /// The item is not on sale now (before the start, after the end, or never).
    NotOnSale,
    /// No such item.
    UnknownItem,
    /// This Idempotency-Key was used for a different item.
    KeyReused,
    /// A unit was reserved for this attempt, but its order was not recorded in time
    /// (the server handling it failed): the unit went back on sale. Try again with a
    /// new key.
    Expired,
    /// The sale's price is not the one the buyer was shown (the sale was started
    /// again with another price meanwhile): nothing was bought, and nothing is
    /// kept for the key. Read the sale's price again and buy at it.
    PriceChanged,
}

impl BuyOutcome {
    /// A short name of the outcome, as stored and as counted in metrics.
    pub fn code(&self) -> &'static str {
        match self {
            BuyOutcome::Bought { .. } => "bought",
            BuyOutcome::SoldOut => "sold_out",
            BuyOutcome::LimitReached => "limit_reached",
            BuyOutcome::NotOnSale => "not_on_sale",
            BuyOutcome::UnknownItem => "unknown_item",
            BuyOutcome::KeyReused => "key_reused",
            BuyOutcome::Expired => "expired",
            BuyOutcome::PriceChanged => "price_changed",
        }
    }

    /// The outcome a [`code`](Self::code) names (`bought` needs its order), or
    /// `None` for text that is none.
    pub fn from_code(code: &str, order_id: Option<i64>) -> Option<Self> {
        Some(match (code, order_id) {
            ("bought", Some(order_id)) => BuyOutcome::Bought { order_id },
            ("sold_out", _) => BuyOutcome::SoldOut,
            ("limit_reached", _) => BuyOutcome::LimitReached,
            ("not_on_sale", _) => BuyOutcome::NotOnSale,
            ("unknown_item", _) => BuyOutcome::UnknownItem,
            ("key_reused", _) => BuyOutcome::KeyReused,
            ("expired", _) => BuyOutcome::Expired,
            ("price_changed", _) => BuyOutcome::PriceChanged,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_reads_back_from_its_code() {
        let all = [
            BuyOutcome::Bought { order_id: 7 },
            BuyOutcome::SoldOut,
            BuyOutcome::LimitReached,
            BuyOutcome::NotOnSale,
            BuyOutcome::UnknownItem,
            BuyOutcome::KeyReused,
            BuyOutcome::Expired,
            BuyOutcome::PriceChanged,
        ];
        for outcome in all {
            let order = match outcome {
                BuyOutcome::Bought { order_id } => Some(order_id),
                _ => None,
            };
            assert_eq!(BuyOutcome::from_code(outcome.code(), order), Some(outcome));
        }
        assert_eq!(BuyOutcome::from_code("bought", None), None);
        assert_eq!(BuyOutcome::from_code("pending", None), None);
    }
}
