//! The generation of the state Redis's page bookkeeping a process knows: pages
//! stored before it count as purged (see the `page_cache` module documentation).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The generation of the state Redis's page bookkeeping this process knows: the
/// purge epoch it began at (0 before the process learnt it). Pages stored at an
/// older epoch count as purged. Shared by every clone of a [`crate::PageStore`] and by
/// the in-process tier.
#[derive(Debug, Clone, Default)]
pub struct Generation(Arc<AtomicU64>);

impl Generation {
    /// The epoch the known generation began at.
    pub fn since(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Learns generation `since`: returns the one known before when it is newer
    /// (a loss of the state Redis found), else `None`.
    pub fn learn(&self, since: u64) -> Option<u64> {
        let before = self.0.fetch_max(since, Ordering::AcqRel);
        (since > before).then_some(before)
    }

    /// Whether a page stored at `epoch` belongs to the known generation.
    pub fn holds(&self, epoch: u64) -> bool {
        epoch >= self.since()
    }
}

/// How many purges this process has seen: its own (counted before
/// [`crate::PageStore::purge`] returns) and every other process's (counted by the
/// in-process tier's feed as their [`crate::PageEvent::Purged`] arrives; a lost
/// subscription counts too, since purges may have been missed). A copy of
/// catalogue data kept in process (the search results) is good while this count
/// is what it was when the copy was read.
#[derive(Debug, Clone, Default)]
pub struct PurgesSeen(Arc<[AtomicU64; 2]>);

impl PurgesSeen {
    /// The count now: read it before reading what is kept.
    pub fn get(&self) -> u64 {
        self.0[0].load(Ordering::Acquire)
    }

    /// One more purge seen, or purges maybe missed (a lost subscription).
    pub fn bump(&self) {
        self.0[0].fetch_add(1, Ordering::AcqRel);
    }

    /// The purges themselves seen (this process's and the events of others'),
    /// not counting a subscription's loss or start: what an edge cache was sent
    /// ([`crate::EdgePurger`] goes from the purging process itself).
    pub fn purges(&self) -> u64 {
        self.0[1].load(Ordering::Acquire)
    }

    /// One more purge seen (counted in [`PurgesSeen::get`] too).
    pub fn bump_purge(&self) {
        self.0[1].fetch_add(1, Ordering::AcqRel);
        self.bump();
    }
}
