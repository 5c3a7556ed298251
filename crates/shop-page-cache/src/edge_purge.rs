//! Purges that reach the edge caches in front of the shop (Varnish with xkey, as
//! `deploy/varnish/shop.vcl` sets it up): the same tags a purge drops from the
//! page store, sent to every edge as `PURGE /` with an `xkey-purge: <tags>`
//! header, before the purge returns. The page's tags reach the edge in its
//! `Surrogate-Key` header ([`crate::SURROGATE_KEY`]).
//!
//! An edge that does not answer 2xx within [`EDGE_PURGE_TIMEOUT`] fails the
//! purge, as Redis failing would: the caller retries and reports it (the shop's
//! catalogue changes do; `shop items purge` finishes the job).
//!
//! Each purge is sent again [`EDGE_REPURGE_AFTER`] later, in the background: an
//! edge that was fetching a page when the purge came (the origin answered it
//! from its cache just before its own purge) stores that page after the purge,
//! which cannot reach a fetch in flight, and would serve it for its whole
//! lifetime. A command that exits waits for those ([`EdgePurger::settle`]).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio_util::task::TaskTracker;

use crate::PageTag;

/// The longest one edge may take to answer one purge.
pub const EDGE_PURGE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long after a purge it is sent to the edges again (see the module doc):
/// far longer than an edge's fetch of a page from the origin takes.
pub const EDGE_REPURGE_AFTER: Duration = Duration::from_secs(1);

/// The header naming the tags to purge (Varnish's xkey vmod).
pub const XKEY_PURGE: &str = "xkey-purge";

/// The most bytes of tags one `PURGE` request names: a purge of more tags (an
/// import of many items) is sent as several, each well under the edge's header
/// limit (Varnish: 8 KiB).
pub const MAX_PURGE_HEADER_BYTES: usize = 4_000;

/// Why an edge purge failed.
#[derive(Debug, thiserror::Error)]
pub enum EdgePurgeError {
    /// The edge could not be reached or did not answer in time.
    #[error("edge {url}: {reason}")]
    Unreachable {
        /// The edge's purge URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The edge answered, but not with success (a 403 from its ACL, say).
    #[error("edge {url} answered {status}")]
    Refused {
        /// The edge's purge URL.
        url: String,
        /// Its status.
        status: u16,
    },
}

/// The edges a purge reaches: `PURGE` to each of their URLs.
#[derive(Clone)]
pub struct EdgePurger {
    urls: Vec<Uri>,
    client: Client<HttpConnector, Empty<Bytes>>,
    /// The purges sent again, in the background (shared by the clones).
    again: TaskTracker,
}

impl std::fmt::Debug for EdgePurger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgePurger")
            .field("urls", &self.urls)
            .finish()
    }
}

impl EdgePurger {
    /// Purges at `urls` (`http://host:port/`, each an edge's address).
    pub fn new(urls: Vec<Uri>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(EDGE_PURGE_TIMEOUT));
        connector.set_nodelay(true);
        Self {
            urls,
            client: Client::builder(TokioExecutor::new()).build(connector),
            again: TaskTracker::new(),
        }
    }

    /// Checks an edge's purge URL: plain `http://` with a host.
    pub fn parse_url(url: &str) -> Result<Uri, String> {
        let uri: Uri = url
            .trim()
            .parse()
            .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        match (uri.scheme_str(), uri.host()) {
            (Some("http"), Some(_)) => Ok(uri),
            _ => Err(format!(
                "`{url}` is not an http://host:port/ URL (an edge's purge address; https is not spoken here)"
            )),
        }
    }

    /// The edges' URLs.
    pub fn urls(&self) -> &[Uri] {
        &self.urls
    }

    /// Drops every page tagged with any of `tags` at every edge, all edges at
    /// once; returns once each answered 2xx, or with the first failure. Sent
    /// again [`EDGE_REPURGE_AFTER`] later, in the background (a failure then is
    /// logged).
    pub async fn purge(&self, tags: &[PageTag]) -> Result<(), EdgePurgeError> {
        if tags.is_empty() || self.urls.is_empty() {
            return Ok(());
        }
        self.purge_now(tags).await?;
        let (edges, tags) = (self.clone(), tags.to_vec());
        self.again.spawn(async move {
            tokio::time::sleep(EDGE_REPURGE_AFTER).await;
            if let Err(error) = edges.purge_now(&tags).await {
                tracing::warn!(%error, "an edge purge sent again failed");
            }
        });
        Ok(())
    }

    /// Waits for the purges sent again so far (before a command exits, which
    /// would cut them off).
    pub async fn settle(&self) {
        self.again.close();
        self.again.wait().await;
        self.again.reopen();
    }

    async fn purge_now(&self, tags: &[PageTag]) -> Result<(), EdgePurgeError> {
        let batches = batches(tags);
        let calls = self
            .urls
            .iter()
            .flat_map(|url| batches.iter().map(move |batch| self.purge_at(url, batch)));
        futures::future::try_join_all(calls).await.map(drop)
    }

    async fn purge_at(&self, url: &Uri, tags: &str) -> Result<(), EdgePurgeError> {
        let unreachable = |reason: String| EdgePurgeError::Unreachable {
            url: url.to_string(),
            reason,
        };
        let value = HeaderValue::from_str(tags).map_err(|e| unreachable(e.to_string()))?;
        let req = Request::builder()
            .method(Method::from_bytes(b"PURGE").expect("a valid method"))
            .uri(url.clone())
            .header(XKEY_PURGE, value)
            .body(Empty::new())
            .map_err(|e| unreachable(e.to_string()))?;
        let resp = tokio::time::timeout(EDGE_PURGE_TIMEOUT, self.client.request(req))
            .await
            .map_err(|_| unreachable(format!("no answer within {EDGE_PURGE_TIMEOUT:?}")))?
            .map_err(|e| unreachable(e.to_string()))?;
        match resp.status().is_success() {
            true => Ok(()),
            false => Err(EdgePurgeError::Refused {
                url: url.to_string(),
                status: resp.status().as_u16(),
            }),
        }
    }
}

/// `tags` as `xkey-purge` values of at most [`MAX_PURGE_HEADER_BYTES`] each.
fn batches(tags: &[PageTag]) -> Vec<String> {
    let mut batches = vec![String::new()];
    for tag in tags {
        let last = batches.last_mut().expect("one batch at least");
        if !last.is_empty() && last.len() + 1 + tag.as_str().len() > MAX_PURGE_HEADER_BYTES {
            batches.push(String::new());
        }
        let last = batches.last_mut().expect("one batch at least");
        if !last.is_empty() {
            last.push(' ');
        }
        last.push_str(tag.as_str());
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_tags_are_split_into_headers_under_the_limit_and_none_is_lost() {
        let tags: Vec<PageTag> = (0..2_000).map(PageTag::item).collect();
        let batches = batches(&tags);
        assert!(batches.len() > 1);
        assert!(batches.iter().all(|b| b.len() <= MAX_PURGE_HEADER_BYTES));
        let sent: Vec<&str> = batches.iter().flat_map(|b| b.split(' ')).collect();
        let expected: Vec<&str> = tags.iter().map(PageTag::as_str).collect();
        assert_eq!(sent, expected);
    }

    #[test]
    fn only_plain_http_urls_are_edges() {
        assert!(EdgePurger::parse_url("http://127.0.0.1:6081/").is_ok());
        assert!(EdgePurger::parse_url("https://edge.example/").is_err());
        assert!(EdgePurger::parse_url("edge:6081").is_err());
        assert!(EdgePurger::parse_url("not a url").is_err());
    }
}
