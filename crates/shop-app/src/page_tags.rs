//! What the shop's cached pages are tagged with, so that a change purges exactly
//! the pages that show it: the one place these names are spelled (a handler tags
//! its page with them, a workflow purges them).

use std::fmt::Write;

use shop_cache::domain::ItemId;
use shop_page_cache::PageTag;

/// One item: its page, its insights, and every listing that shows it.
pub fn item(item: ItemId) -> PageTag {
    PageTag::item(item.get())
}

/// Every listing page of one department (`d` and the name's bytes in hex: any
/// name, one tag).
pub fn department(name: &str) -> PageTag {
    let mut tag = String::with_capacity(1 + 2 * name.len());
    tag.push('d');
    for byte in name.bytes() {
        let _ = write!(tag, "{byte:02x}");
    }
    PageTag::new(&tag)
}

/// Every page that lists the departments (a department appears or goes).
pub fn departments() -> PageTag {
    PageTag::new("depts")
}

/// Every page of the whole catalogue's listing (an item is added or leaves).
pub fn all_items() -> PageTag {
    PageTag::new("all")
}

/// Every page listing the sales (a sale starts).
pub fn sales() -> PageTag {
    PageTag::new("sales")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names pages were tagged with before, so a purge after an upgrade
    /// still finds the pages stored before it.
    #[test]
    fn tags_keep_their_names() {
        assert_eq!(item(ItemId::new(42).unwrap()).as_str(), "i42");
        assert_eq!(
            department("Books & more").as_str(),
            "d426f6f6b732026206d6f7265"
        );
        assert_eq!(departments().as_str(), "depts");
        assert_eq!(all_items().as_str(), "all");
        assert_eq!(sales().as_str(), "sales");
    }
}
