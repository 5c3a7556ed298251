//! A request reduced to what makes its page different, and the key it is cached
//! under: the same in every process and release.

use sha2::{Digest, Sha256};

/// A request reduced to what makes its page different: the path, the query
/// parameters in a canonical order, and the values of the headers the page varies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    path: String,
    query: Vec<(String, String)>,
    vary: Vec<(String, Vec<u8>)>,
}

impl PageRequest {
    /// The request for `path` with its raw query string (without the `?`). Parameters
    /// are decoded and sorted, so their order and spelling (`%41` vs `A`) do not matter.
    pub fn new(path: &str, raw_query: Option<&str>) -> Self {
        let mut query: Vec<(String, String)> = raw_query
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        query.sort();
        Self {
            path: path.to_owned(),
            query,
            vary: Vec::new(),
        }
    }

    /// Adds a header the page varies on (name case-insensitive; absent = empty).
    pub fn vary_on(mut self, name: &str, value: &[u8]) -> Self {
        self.vary
            .push((name.to_ascii_lowercase(), value.trim_ascii().to_vec()));
        self.vary.sort();
        self
    }

    /// Keeps only the query parameters named in `allowed`: the ones the page reads.
    /// Any other parameter cannot change the page, so it must not change the key
    /// either (else `?r=<random>` makes a new entry and a render per request).
    pub fn only_params(mut self, allowed: &[&str]) -> Self {
        self.query.retain(|(k, _)| allowed.contains(&k.as_str()));
        self
    }

    /// True if the query has a parameter called `name` (with any value).
    pub fn has_param(&self, name: &str) -> bool {
        self.query.iter().any(|(k, _)| k == name)
    }

    /// The stable key: SHA-256 over a length-prefixed encoding of the normalised
    /// request (so no two different requests encode alike), in hex.
    pub fn key(&self) -> PageKey {
        let mut h = Sha256::new();
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        };
        // v2: pages are stored with tags (a page stored by an earlier release is in
        // no tag's index, so a purge could not reach it).
        field(b"shop-page-v2");
        field(b"GET");
        field(self.path.as_bytes());
        field(&(self.query.len() as u64).to_be_bytes());
        for (k, v) in &self.query {
            field(k.as_bytes());
            field(v.as_bytes());
        }
        field(&(self.vary.len() as u64).to_be_bytes());
        for (k, v) in &self.vary {
            field(k.as_bytes());
            field(v);
        }
        // Into a buffer at once: `hex::encode` collects one `char` at a time,
        // a percent of a cached page's CPU.
        let mut hex = [0u8; 64];
        hex::encode_to_slice(h.finalize(), &mut hex).expect("64 digits for 32 bytes");
        PageKey(String::from_utf8(hex.to_vec()).expect("hex digits are ASCII"))
    }
}

/// The hex SHA-256 naming a cached page.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey(pub(super) String);

impl PageKey {
    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A key read back from a message: exactly 64 lower-case hex digits.
    pub(super) fn parse(hex: &str) -> Option<Self> {
        (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(hex.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages stored by an earlier release keep their names: the key is the
    /// lower-case hex of the digest of the encoding the module doc describes, as
    /// `hex::encode` spelled it.
    #[test]
    fn a_key_is_the_lower_case_hex_of_its_digest() {
        let mut h = Sha256::new();
        let zero = 0u64.to_be_bytes();
        for bytes in [&b"shop-page-v2"[..], b"GET", b"/items/42", &zero, &zero] {
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(bytes);
        }
        let key = PageRequest::new("/items/42", None).key();
        assert_eq!(key.as_str(), hex::encode(h.finalize()));
        assert_eq!(PageKey::parse(key.as_str()), Some(key.clone()));
        assert_ne!(PageRequest::new("/items/42", Some("page=2")).key(), key);
    }
}
