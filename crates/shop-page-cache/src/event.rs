//! What a page store tells every web server's in-process tier, over one pub/sub
//! channel: pages purged, a page stored anew, a new generation.

use crate::PageKey;

/// What the web servers' in-process page tiers hear on [`crate::PageKeys::events`]: a
/// copy of a page they may hold is no longer the one to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageEvent {
    /// These pages were purged (published by [`crate::PageStore::purge`] after their
    /// tombstones are written, before it returns).
    Purged(Vec<PageKey>),
    /// A new version of this page was stored, by the [`crate::PageStore::origin`] `by`
    /// (its own tier keeps the version it stored).
    Stored {
        /// The page.
        key: PageKey,
        /// Which process stored it.
        by: u64,
    },
    /// The state Redis lost its data and a new generation began at this epoch:
    /// every page stored before it counts as purged.
    Generation(u64),
}

impl PageEvent {
    /// The message: `P <hash> <hash> ...`, `S <origin> <hash>` or `G <since>`.
    pub fn encode(&self) -> String {
        match self {
            PageEvent::Purged(keys) => {
                let mut out = String::with_capacity(2 + keys.len() * 65);
                out.push('P');
                for key in keys {
                    out.push(' ');
                    out.push_str(key.as_str());
                }
                out
            }
            PageEvent::Stored { key, by } => format!("S {by} {}", key.as_str()),
            PageEvent::Generation(since) => format!("G {since}"),
        }
    }

    /// Reads what [`PageEvent::encode`] wrote; `None` for anything else.
    pub fn decode(message: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(message).ok()?;
        let mut words = text.split(' ');
        match words.next()? {
            "P" => words
                .map(PageKey::parse)
                .collect::<Option<Vec<_>>>()
                .map(PageEvent::Purged),
            "S" => {
                let by = words.next()?.parse().ok()?;
                let key = PageKey::parse(words.next()?)?;
                words
                    .next()
                    .is_none()
                    .then_some(PageEvent::Stored { key, by })
            }
            "G" => {
                let since = words.next()?.parse().ok()?;
                words
                    .next()
                    .is_none()
                    .then_some(PageEvent::Generation(since))
            }
            _ => None,
        }
    }
}
