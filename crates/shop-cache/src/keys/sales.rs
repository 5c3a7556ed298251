//! The keys of flash sales: each sale's hash, buyers, answers and reservations,
//! and the list of loaded sales.

use super::*;

impl Keys {
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

    /// Sorted set: item -> end of its sale (unix seconds): the sales loaded in Redis.
    pub fn sales(&self) -> String {
        format!("{}sales:", self.0.prefix)
    }
}
