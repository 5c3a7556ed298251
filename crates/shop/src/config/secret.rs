//! Connection URLs that may hold a password, printed without it.

use serde::Deserialize;

/// A connection URL that may hold a password (`--redis-url`, `--database-url`).
/// Printed (`Debug`, `Display`) with the password replaced, so a configuration
/// that is logged or shown in an error never carries it: the type redacts, not
/// each caller. [`SecretUrl::expose`] gives the real URL, to connect with.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL as given, password included. Only for connecting.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self)
    }
}

impl std::str::FromStr for SecretUrl {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretUrl({:?})", redact_url(&self.0))
    }
}

/// The URL with every password replaced, for printing and logs: the one before
/// the `@` (`redis://user:***@host`), and any query parameter that names one
/// (`?password=***`, `pass`, `passwd`, `sslpassword`, `pwd`, and anything called a
/// secret or a token), which drivers accept as well.
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut out = redact_userinfo(head);
    if let Some(query) = query {
        let (query, fragment) = match query.split_once('#') {
            Some((q, f)) => (q, Some(f)),
            None => (query, None),
        };
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if names_a_secret(name) => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
        if let Some(fragment) = fragment {
            out.push('#');
            out.push_str(fragment);
        }
    }
    out
}

/// A query parameter whose value is a credential.
fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["pass", "pwd", "secret", "token"]
        .iter()
        .any(|word| name.contains(word))
}

/// `scheme://user:password@rest` with the password replaced.
fn redact_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let user_end = url[scheme_end + 3..at]
                .find(':')
                .map(|i| scheme_end + 3 + i);
            match user_end {
                Some(colon) => format!("{}:***{}", &url[..colon], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
