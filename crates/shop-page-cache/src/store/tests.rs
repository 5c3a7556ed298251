//! The page store's encodings and keys, without Redis.

use super::*;
use crate::PageRequest;
use proptest::prelude::*;

#[test]
fn the_key_of_a_known_request_is_pinned() {
    // Changing this value invalidates every cached page of every deployment:
    // only do it on purpose, with the format tag in `key()` bumped.
    let req = PageRequest::new("/items/42", Some("b=2&a=1")).vary_on("Accept-Language", b"en");
    assert_eq!(
        req.key().as_str(),
        "32695f66c9420a66189bb4c19599f008972888371837f831601fad0837c9acc0"
    );
}

#[test]
fn query_order_and_encoding_do_not_change_the_key() {
    let a = PageRequest::new("/items/1", Some("a=1&b=2&c=x+y"));
    let b = PageRequest::new("/items/1", Some("c=x%20y&b=2&a=1"));
    let c = PageRequest::new("/items/1", Some("%61=1&b=2&c=x+y"));
    assert_eq!(a.key(), b.key());
    assert_eq!(a.key(), c.key());
}

#[test]
fn what_differs_changes_the_key() {
    let base = PageRequest::new("/items/1", Some("a=1"));
    for other in [
        PageRequest::new("/items/2", Some("a=1")),
        PageRequest::new("/items/1", Some("a=2")),
        PageRequest::new("/items/1", Some("a=1&a=1")),
        PageRequest::new("/items/1", None),
        PageRequest::new("/items/1", Some("a=1")).vary_on("accept-language", b"en"),
    ] {
        assert_ne!(base.key(), other.key(), "{other:?}");
    }
    // Field boundaries are unambiguous.
    assert_ne!(
        PageRequest::new("/x", Some("ab=c")).key(),
        PageRequest::new("/x", Some("a=bc")).key()
    );
}

#[test]
fn header_names_are_case_insensitive_and_values_trimmed() {
    let a = PageRequest::new("/", None).vary_on("Accept-Language", b" de ");
    let b = PageRequest::new("/", None).vary_on("accept-language", b"de");
    assert_eq!(a.key(), b.key());
}

#[test]
fn stored_pages_round_trip() {
    let body = "<html>".repeat(1000);
    let page = StoredPage::new(
        200,
        vec![("content-type".into(), b"text/html; charset=utf-8".to_vec())],
        body.as_bytes(),
    );
    assert!(page.gzip_body().len() < body.len() / 10);
    let back = StoredPage::decode(&page.encode()).unwrap();
    assert_eq!(back, page);
    assert_eq!(back.body().unwrap(), body.as_bytes());
    assert!(page.etag().starts_with('"') && page.etag().ends_with('"'));
}

#[test]
fn a_response_etag_is_kept() {
    let page = StoredPage::new(200, vec![("etag".into(), b"\"v7\"".to_vec())], b"x");
    assert_eq!(page.etag(), "\"v7\"");
    assert!(page.headers().is_empty());
}

#[test]
fn page_events_round_trip_and_garbage_is_refused() {
    let a = PageRequest::new("/items/1", None).key();
    let b = PageRequest::new("/items/2", None).key();
    for event in [
        PageEvent::Purged(vec![a.clone(), b.clone()]),
        PageEvent::Purged(vec![]),
        PageEvent::Stored {
            key: a.clone(),
            by: 7,
        },
    ] {
        assert_eq!(PageEvent::decode(event.encode().as_bytes()), Some(event));
    }
    for bad in [
        "",
        "X",
        "P nothex",
        "S 7",
        "S x 00",
        &format!("S 1 {} extra", a.as_str()),
        &format!("P {}", a.as_str().to_uppercase()),
    ] {
        assert_eq!(PageEvent::decode(bad.as_bytes()), None, "{bad}");
    }
}

#[test]
fn garbage_does_not_decode() {
    for bad in [
        &b""[..],
        b"\x02",
        b"\x01\x00",
        b"\x01\x00\xc8\xff\xff\xff\xff",
    ] {
        assert!(StoredPage::decode(bad).is_err());
    }
}

proptest! {
    #[test]
    fn any_parameter_order_gives_the_same_key(
        params in proptest::collection::vec(("[a-z_]{1,4}", "[ -~]{0,6}"), 0..6),
        seed in any::<u64>(),
    ) {
        let encode = |ps: &[(String, String)]| {
            form_urlencoded::Serializer::new(String::new()).extend_pairs(ps).finish()
        };
        let mut shuffled = params.clone();
        // A deterministic shuffle driven by the seed.
        let n = shuffled.len();
        for i in (1..n).rev() {
            shuffled.swap(i, (seed as usize).wrapping_mul(i + 7) % (i + 1));
        }
        prop_assert_eq!(
            PageRequest::new("/p", Some(&encode(&params))).key(),
            PageRequest::new("/p", Some(&encode(&shuffled))).key()
        );
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = StoredPage::decode(&bytes);
    }

    #[test]
    fn encode_decode_round_trips(
        status in 100u16..600,
        headers in proptest::collection::vec(("[a-z-]{1,12}", proptest::collection::vec(any::<u8>(), 0..20)), 0..4),
        body in proptest::collection::vec(any::<u8>(), 0..2000),
    ) {
        let page = StoredPage::new(status, headers, &body);
        let back = StoredPage::decode(&page.encode()).unwrap();
        prop_assert_eq!(back.body().unwrap(), body);
        prop_assert_eq!(back, page);
    }
}
