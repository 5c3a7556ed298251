//! The session token: the bearer secret in the session cookie that names a
//! session's keys in Redis.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::InvalidInput;

/// 128 random bits from the operating system's CSPRNG, as 22 URL-safe base64
/// characters. The only way to get one is to generate it or to parse a
/// well-formed one, so a hostile cookie never becomes part of a Redis key.
///
/// `Debug` does not print the token: it is a bearer secret and must not reach logs.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionToken(String);

impl SessionToken {
    /// Length of the text form: 16 bytes in unpadded base64.
    pub const LEN: usize = 22;

    /// A fresh token from the OS random source.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the operating system has no random source");
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The secret text, for the cookie and for building keys. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for SessionToken {
    type Err = InvalidInput;

    /// Accepts exactly what [`SessionToken::generate`] produces: 22 characters of the
    /// URL-safe alphabet that decode to 16 bytes with no stray trailing bits.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != Self::LEN {
            return Err(InvalidInput::SessionToken);
        }
        match URL_SAFE_NO_PAD.decode(s) {
            Ok(bytes) if bytes.len() == 16 => Ok(Self(s.to_owned())),
            _ => Err(InvalidInput::SessionToken),
        }
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_tokens_parse_and_differ() {
        let a = SessionToken::generate();
        let b = SessionToken::generate();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), SessionToken::LEN);
        assert_eq!(a.expose().parse::<SessionToken>().unwrap(), a);
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let good = SessionToken::generate();
        let long = format!("{}A", good.expose());
        for bad in [
            "",
            "short",
            &long,
            "AAAAAAAAAAAAAAAAAAAAA=", // padding
            "AAAAAAAAAAAAAAAAAAAAA+", // standard, not URL-safe alphabet
            "AAAAAAAAAAAAAAAAAAAAA/", // standard, not URL-safe alphabet
            "AAAAAAAAAAAAAAAAAAAAA:", // would be a key separator
            "AAAAAAAAAAAAAAAAAAAAAB", // stray trailing bits: not canonical
            "AAAAAAAAAAAAAAAAAAAA é", // non-ASCII
            "AAAAAAAAAA AAAAAAAAAAA",
        ] {
            assert_eq!(
                bad.parse::<SessionToken>(),
                Err(InvalidInput::SessionToken),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn debug_does_not_leak_the_token() {
        let t = SessionToken::generate();
        assert!(!format!("{t:?}").contains(t.expose()));
    }

    proptest! {
        #[test]
        fn parsing_accepts_only_what_it_would_generate(s in "\\PC{0,30}") {
            if let Ok(t) = s.parse::<SessionToken>() {
                let bytes = URL_SAFE_NO_PAD.decode(t.expose()).unwrap();
                prop_assert_eq!(URL_SAFE_NO_PAD.encode(bytes), s);
            }
        }

        #[test]
        fn any_sixteen_bytes_round_trip(bytes in proptest::array::uniform16(any::<u8>())) {
            let text = URL_SAFE_NO_PAD.encode(bytes);
            prop_assert!(text.parse::<SessionToken>().is_ok());
        }
    }
}
