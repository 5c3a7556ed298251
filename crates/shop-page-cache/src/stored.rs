//! What a cached page is stored as: the response to replay, its body gzip-compressed,
//! in an entry that says until when it is fresh (or a purge's tombstone), and how long
//! past that it may be served.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use shop_cache::CacheError;

/// A cached response: what is needed to replay it, body compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPage {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    etag: String,
    gzip: Bytes,
}

/// The first byte of the stored form; bump it when the layout changes, and old
/// entries read as misses rather than garbage.
pub(crate) const FORMAT_VERSION: u8 = 1;
/// The first byte of a purged page's tombstone (then its epoch, in ASCII).
pub(crate) const TOMBSTONE: u8 = 0;
/// The first byte of a stored entry of releases before generations: then until
/// when it is fresh (unix ms, u64 big-endian), then the page. Read as stored at
/// epoch 0 (before any generation).
pub(crate) const ENTRY_WITHOUT_EPOCH: u8 = 2;
/// The first byte of a stored entry: then until when it is fresh (unix ms, u64
/// big-endian), the purge epoch its render began at (u64 big-endian), then the
/// page ([`StoredPage::encode`]).
pub(crate) const ENTRY: u8 = 3;

/// A stored entry read back.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) page: StoredPage,
    /// Until when it is fresh (unix ms).
    pub(crate) fresh_until: u64,
    /// The purge epoch its render began at: older than the generation's start,
    /// it counts as purged.
    pub(crate) epoch: u64,
}

/// A stored value read back: an entry, or nothing (no value, or a purged page's
/// tombstone).
pub(crate) fn decode_entry(bytes: &[u8]) -> Option<Result<Entry, CacheError>> {
    let corrupt = || CacheError::Corrupt { what: "cache:" };
    let entry = |page: &[u8], fresh_until, epoch| {
        StoredPage::decode(page).map(|page| Entry {
            page,
            fresh_until,
            epoch,
        })
    };
    match *bytes.first()? {
        TOMBSTONE => None,
        ENTRY => {
            let Some((until, rest)) = bytes[1..].split_first_chunk::<8>() else {
                return Some(Err(corrupt()));
            };
            let Some((epoch, page)) = rest.split_first_chunk::<8>() else {
                return Some(Err(corrupt()));
            };
            Some(entry(
                page,
                u64::from_be_bytes(*until),
                u64::from_be_bytes(*epoch),
            ))
        }
        ENTRY_WITHOUT_EPOCH => {
            let Some((until, page)) = bytes[1..].split_first_chunk::<8>() else {
                return Some(Err(corrupt()));
            };
            Some(entry(page, u64::from_be_bytes(*until), 0))
        }
        // A bare page, as releases before serve-stale stored them: fresh for the
        // rest of its TTL.
        _ => Some(entry(bytes, u64::MAX, 0)),
    }
}

pub(crate) fn encode_entry(page: &StoredPage, fresh_until_ms: u64, epoch: u64) -> Vec<u8> {
    let mut out = vec![ENTRY];
    out.extend_from_slice(&fresh_until_ms.to_be_bytes());
    out.extend_from_slice(&epoch.to_be_bytes());
    out.extend_from_slice(&page.encode());
    out
}

/// Unix time in milliseconds, on this process's clock (what an entry's "fresh
/// until" is counted in).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How long an expired page may still be served (RFC 5861's two windows). A purge
/// removes stale copies too: they stay indexed under their tags as long as they
/// are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StaleGrace {
    /// After its TTL, the page is served as it is while one request (across every
    /// web server: the render lock) renders it again.
    pub while_revalidate: Duration,
    /// After its TTL, the page is served instead of an error while it cannot be
    /// rendered (the database unreachable or locked).
    pub if_error: Duration,
}

impl StaleGrace {
    /// How long past its TTL a stored page is kept.
    pub fn keep(&self) -> Duration {
        self.while_revalidate.max(self.if_error)
    }
}

/// The ETag of a page without one of its own: derived from its body (as sent
/// decompressed), so the same bytes have the same ETag on every server.
pub(crate) fn body_etag(body: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(body))[..32])
}

impl StoredPage {
    /// Compresses `body` and keeps `headers` (lower-case names) for replay. The ETag
    /// is the response's own if it has one, else derived from the body.
    pub fn new(status: u16, headers: Vec<(String, Vec<u8>)>, body: &[u8]) -> Self {
        let etag = headers
            .iter()
            .find(|(name, _)| name == "etag")
            .and_then(|(_, v)| String::from_utf8(v.clone()).ok())
            .unwrap_or_else(|| body_etag(body));
        let headers = headers.into_iter().filter(|(n, _)| n != "etag").collect();
        let mut enc = GzEncoder::new(Vec::with_capacity(body.len() / 4), Compression::default());
        enc.write_all(body).expect("writing to a Vec cannot fail");
        let gzip = Bytes::from(enc.finish().expect("writing to a Vec cannot fail"));
        Self {
            status,
            headers,
            etag,
            gzip,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The replayed headers (without the ETag, see [`StoredPage::etag`]).
    pub fn headers(&self) -> &[(String, Vec<u8>)] {
        &self.headers
    }

    /// The entity tag, quoted, for `ETag` and `If-None-Match`.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The body as stored, gzip-compressed: what a client accepting gzip is sent.
    pub fn gzip_body(&self) -> Bytes {
        self.gzip.clone()
    }

    /// The body decompressed, for clients that do not accept gzip.
    pub fn body(&self) -> Result<Vec<u8>, CacheError> {
        let mut out = Vec::with_capacity(self.gzip.len() * 4);
        GzDecoder::new(&self.gzip[..])
            .read_to_end(&mut out)
            .map_err(|_| CacheError::Corrupt { what: "cache:" })?;
        Ok(out)
    }

    /// The stored form: version, status, ETag, headers, then the gzip body; every
    /// variable part length-prefixed (u32 big-endian).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.gzip.len() + 256);
        out.push(FORMAT_VERSION);
        out.extend_from_slice(&self.status.to_be_bytes());
        put(&mut out, self.etag.as_bytes());
        out.extend_from_slice(&(self.headers.len() as u32).to_be_bytes());
        for (name, value) in &self.headers {
            put(&mut out, name.as_bytes());
            put(&mut out, value);
        }
        out.extend_from_slice(&self.gzip);
        out
    }

    /// Reads what [`StoredPage::encode`] wrote; anything else is `Corrupt`.
    pub fn decode(bytes: &[u8]) -> Result<Self, CacheError> {
        let corrupt = || CacheError::Corrupt { what: "cache:" };
        let mut r = Reader(bytes);
        if r.take(1).ok_or_else(corrupt)? != [FORMAT_VERSION] {
            return Err(corrupt());
        }
        let status = u16::from_be_bytes(r.take(2).ok_or_else(corrupt)?.try_into().unwrap());
        let etag =
            String::from_utf8(r.field().ok_or_else(corrupt)?.to_vec()).map_err(|_| corrupt())?;
        let count = r.u32().ok_or_else(corrupt)?;
        let mut headers = Vec::new();
        for _ in 0..count {
            let name = String::from_utf8(r.field().ok_or_else(corrupt)?.to_vec())
                .map_err(|_| corrupt())?;
            let value = r.field().ok_or_else(corrupt)?.to_vec();
            headers.push((name, value));
        }
        Ok(Self {
            status,
            headers,
            etag,
            gzip: Bytes::copy_from_slice(r.0),
        })
    }
}

pub(crate) fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn field(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}
