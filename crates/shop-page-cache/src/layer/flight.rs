//! Single flight: the misses of one key in this process wait for the first one's
//! render instead of each calling the handler. The first is the [`Leader`]; the
//! others are [`Follower`]s that get its page, or give up after a wait and render
//! it themselves (the page was not storable, the render failed or is too slow).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{PageKey, StoredPage};
use tokio::sync::watch;

/// The renders under way in this process, by key.
#[derive(Default)]
pub(super) struct Flights(Mutex<HashMap<PageKey, watch::Receiver<Option<Arc<StoredPage>>>>>);

/// What a miss does: render, or wait for the render under way.
pub(super) enum Role {
    /// The first miss of the key.
    Leader(Leader),
    /// A miss while another renders.
    Follower(Follower),
}

impl Flights {
    /// Joins the flight of `key`, starting it if there is none.
    pub(super) fn join(self: &Arc<Self>, key: &PageKey) -> Role {
        let mut flights = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match flights.get(key) {
            Some(flight) => Role::Follower(Follower(flight.clone())),
            None => {
                let (tx, rx) = watch::channel(None);
                flights.insert(key.clone(), rx);
                Role::Leader(Leader {
                    flights: self.clone(),
                    key: key.clone(),
                    tx,
                })
            }
        }
    }
}

/// Renders the page and hands it to the followers. Dropping it (finished, or
/// abandoned because the client went away) ends the flight, so the next miss of
/// the key starts a new one, and wakes the followers still waiting.
pub(super) struct Leader {
    flights: Arc<Flights>,
    key: PageKey,
    tx: watch::Sender<Option<Arc<StoredPage>>>,
}

impl Leader {
    /// Gives the followers the page.
    pub(super) fn publish(&self, page: Arc<StoredPage>) {
        self.tx.send_replace(Some(page));
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        let mut flights = self.flights.0.lock().unwrap_or_else(|e| e.into_inner());
        flights.remove(&self.key);
    }
}

/// Waits for a leader's page.
pub(super) struct Follower(watch::Receiver<Option<Arc<StoredPage>>>);

impl Follower {
    /// The leader's page, or `None` if it ended without one or `limit` passed.
    pub(super) async fn wait(mut self, limit: Duration) -> Option<Arc<StoredPage>> {
        match tokio::time::timeout(limit, self.0.wait_for(Option::is_some)).await {
            Ok(Ok(page)) => page.clone(),
            _ => None,
        }
    }
}
