//! Bounds on the sale pages' event streams (`GET /api/flash/events`): an open
//! stream holds a connection, a file descriptor and a task for as long as the
//! client keeps it, so a client that opens thousands of idle ones could take the
//! process's open-files limit and memory from everyone else.
//!
//! - At most [`StreamLimits::total`] streams open in this process, and at most
//!   [`StreamLimits::per_address`] from one client address (the login limits'
//!   [`ClientAddress`]: the peer, or behind a trusted proxy the address it
//!   forwarded; for IPv6 its /64, and 4 and 16 times as many from its /56 and
//!   /48). Past the first, 503 (the server is busy), past the second 429 (the
//!   client holds its share), both with `Retry-After`, before anything is opened. A
//!   stream gives its place back the moment it ends, however it ends.
//! - Each stream ends after [`StreamLimits::lifetime`]; the page's `EventSource`
//!   reconnects by itself (and is counted again), so a forgotten tab cannot hold
//!   a place for ever.
//! - The board is serialised once per change for all streams ([`Streams::json`]),
//!   not once per stream.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shop_cache::domain::client::ClientAddress;
use shop_cache::flash_sale::Board;

use crate::client_shares::{Share, Shares};

/// How many event streams may be open, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Streams open in this process at once.
    pub total: usize,
    /// Streams open from one client address at once.
    pub per_address: usize,
    /// How long one stream lasts before the client must reconnect.
    pub lifetime: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            total: 5_000,
            per_address: 20,
            lifetime: Duration::from_secs(600),
        }
    }
}

/// The open streams of this process, and the board as JSON.
#[derive(Debug, Default)]
pub struct Streams {
    open: AtomicUsize,
    by_address: Arc<Shares>,
    /// The last board serialised, and its JSON.
    last: Mutex<Option<(Board, Arc<str>)>>,
}

/// Why a stream was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The process holds [`StreamLimits::total`] streams.
    Full,
    /// This address (or a block it is in) holds its share of streams.
    TooManyFromAddress,
}

impl Streams {
    /// How many streams are open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Takes a place for a stream from `address` (`None`: not known, counted
    /// together), or says why not: each block the address counts in (an IPv6
    /// client's /64, /56 and /48) holds at most its shares of
    /// [`StreamLimits::per_address`]. The place is given back when the slot drops.
    pub fn admit(
        self: &Arc<Self>,
        address: Option<ClientAddress>,
        limits: StreamLimits,
    ) -> Result<StreamSlot, Refused> {
        let share = self
            .by_address
            .take(address, limits.per_address)
            .ok_or(Refused::TooManyFromAddress)?;
        if self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limits.total).then_some(n + 1)
            })
            .is_err()
        {
            return Err(Refused::Full);
        }
        Ok(StreamSlot {
            streams: self.clone(),
            _share: share,
        })
    }

    /// `board` as the events' JSON, serialised once per board however many
    /// streams ask (every receiver of the board sees the same `Arc`).
    pub fn json(&self, board: &Board) -> Arc<str> {
        let mut last = lock(&self.last);
        if let Some((seen, json)) = last.as_ref()
            && Arc::ptr_eq(seen, board)
        {
            return json.clone();
        }
        let sales: Vec<_> = board.values().collect();
        let json: Arc<str> = serde_json::to_string(&sales)
            .expect("sale states always serialize")
            .into();
        *last = Some((board.clone(), json.clone()));
        json
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One stream's place; dropping it (the stream ended, or its client went away)
/// gives the place back.
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<Streams>,
    /// Its client's place (given back when dropped).
    _share: Share,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.streams.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_capped_per_address_and_in_all_and_given_back() {
        let streams = Arc::new(Streams::default());
        let limits = StreamLimits {
            total: 3,
            per_address: 2,
            lifetime: Duration::from_secs(1),
        };
        let a = |s: &str| Some(ClientAddress::of(s.parse().unwrap()));
        let one = streams.admit(a("1.1.1.1"), limits).unwrap();
        let _two = streams.admit(a("1.1.1.1"), limits).unwrap();
        assert_eq!(
            streams.admit(a("1.1.1.1"), limits).unwrap_err(),
            Refused::TooManyFromAddress
        );
        let _three = streams.admit(a("2.2.2.2"), limits).unwrap();
        assert_eq!(
            streams.admit(a("3.3.3.3"), limits).unwrap_err(),
            Refused::Full
        );
        assert_eq!(streams.open(), 3);
        drop(one);
        assert_eq!(streams.open(), 2);
        assert!(streams.admit(a("1.1.1.1"), limits).is_ok());
        assert!(
            streams.by_address.blocks_held() <= 2,
            "no entry left behind"
        );
    }

    #[test]
    fn a_board_is_serialised_once() {
        let streams = Streams::default();
        let board = Board::default();
        let first = streams.json(&board);
        assert!(Arc::ptr_eq(&first, &streams.json(&board.clone())));
        let other = Board::default();
        assert!(
            !Arc::ptr_eq(&first, &streams.json(&other)),
            "a new board is new JSON"
        );
    }
}
