//! [`PageTag`]: a name for what a cached page shows, so that a change to it purges
//! the page. The app decides its tags (an item, a department, "every listing");
//! the cache only indexes pages under them.

use std::fmt::Write;

use axum::response::Response;
use shop_cache::domain::ItemId;

/// Set by a handler on its response: what the page shows (its items, its
/// department), so that a change to any of them purges the stored page. Never
/// sent to the client.
#[derive(Debug, Clone, Default)]
pub struct PageTags(pub Vec<PageTag>);

impl PageTags {
    /// The tags of a rendered page: those its handler set (taken off the
    /// response) and its item's.
    pub(crate) fn take(resp: &mut Response, item: Option<ItemId>) -> Vec<PageTag> {
        let mut tags = resp
            .extensions_mut()
            .remove::<PageTags>()
            .map(|PageTags(tags)| tags)
            .unwrap_or_default();
        tags.extend(item.map(|item| PageTag::item(item.get())));
        tags
    }
}

/// What a cached page shows. Cheap to compare; its name is safe in a Redis key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageTag(String);

impl PageTag {
    /// The tag named `name`. A name of ASCII letters, digits, `.`, `_` and `-` is
    /// kept as it is; any other (empty, spaces, braces, non-ASCII) is written as
    /// `~` and its bytes in hex, so two names never share a tag and no name can
    /// change a key's hash slot.
    pub fn new(name: &str) -> Self {
        let plain = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if plain {
            return Self(name.to_owned());
        }
        let mut hex = String::with_capacity(1 + 2 * name.len());
        hex.push('~');
        for byte in name.bytes() {
            let _ = write!(hex, "{byte:02x}");
        }
        Self(hex)
    }

    /// The tag of one item (`i<id>`): its page, and every page that lists it. The
    /// layer tags a page of [`crate::Pages::Ranked`] with its item by itself.
    pub fn item(id: u64) -> Self {
        Self(format!("i{id}"))
    }

    /// The tag's name, as it appears in its keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_kept_and_others_cannot_clash_or_move_a_slot() {
        assert_eq!(PageTag::new("depts").as_str(), "depts");
        assert_eq!(PageTag::item(42), PageTag::new("i42"));
        assert_eq!(PageTag::new("a b").as_str(), "~612062");
        assert_eq!(PageTag::new("").as_str(), "~");
        assert_eq!(PageTag::new("{x}").as_str(), "~7b787d");
        assert_ne!(PageTag::new("~61"), PageTag::new("a"));
    }
}
