//! The keys of the database row cache: its schedule, delays and cached rows.

use super::*;

impl Keys {
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
}
