//! The keys of page-view analytics and shopper insights: the view ranking, each
//! item's viewers and buyers, what was bought together.

use super::*;

impl Keys {
    /// Sorted set: item id -> minus its view count (most viewed at rank 0).
    pub fn item_views(&self) -> &str {
        &self.0.item_views
    }

    /// Sorted set: item id -> when it left the ranking (retired), the last
    /// [`crate::analytics::UNRANKED_FOR`]'s: view counts written after that
    /// (views held in a web server's batch when it was retired) are not
    /// counted for it. Beside `viewed:` (its slot on a cluster).
    pub fn unranked(&self) -> &str {
        &self.0.unranked
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

    /// String: the number of the last view-count call of the ranking that process
    /// `writer` applied (so a call sent again after a lost answer counts once);
    /// beside `viewed:` (its slot on a cluster), expiring.
    pub fn ranking_writer(&self, writer: &str) -> String {
        let tag = match self.0.layout {
            Layout::Book => "",
            Layout::Cluster { .. } => "{views}:",
        };
        format!("{}view-writer:{tag}{writer}", self.0.prefix)
    }

    /// String: the server time (unix seconds) of the last rescale of `viewed:`, so
    /// several workers rescale once per interval.
    pub fn views_rescaled(&self) -> &str {
        &self.0.views_rescaled
    }
}
