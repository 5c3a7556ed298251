//! Login limits: per address every attempt counts; per account name only failures,
//! and a name at its limit slows down (one try per interval) instead of shutting
//! out, except for a browser holding that account's device cookie.

use std::time::{Duration, Instant};

use shop_cache::domain::client::ClientAddress;
use shop_cache::login_limit::{Attempt, LoginLimiter, LoginLimits};

use crate::{Fixture, both_layouts};

fn limiter(fx: &Fixture, per_address: u32, per_name: u32, slow_down: Duration) -> LoginLimiter {
    LoginLimiter::new(
        fx.conn.clone(),
        fx.keys.clone(),
        LoginLimits {
            per_address,
            per_name,
            window: Duration::from_secs(60),
            slow_down: Some(slow_down),
        },
    )
}

/// The client at `ip`.
fn at(ip: &str) -> ClientAddress {
    ClientAddress::of(ip.parse().unwrap())
}

/// A failed attempt: allowed, then settled as a failure.
async fn fail(limiter: &LoginLimiter, address: &str, name: &str) -> Attempt {
    let attempt = limiter
        .attempt(Some(&at(address)), name, None)
        .await
        .unwrap();
    if attempt == Attempt::Allowed {
        limiter.failed(name, None).await.unwrap();
    }
    attempt
}

both_layouts! {
async fn every_attempt_counts_per_address(fx: Fixture) {
    let limiter = limiter(&fx, 3, 1_000, Duration::from_secs(6));
    for name in ["a", "b", "c"] {
        assert_eq!(fail(&limiter, "10.0.0.1", name).await, Attempt::Allowed);
    }
    let refused = limiter.attempt(Some(&at("10.0.0.1")), "d", None).await.unwrap();
    assert!(
        matches!(refused, Attempt::Refused { retry_after } if retry_after <= Duration::from_secs(60) && !retry_after.is_zero()),
        "{refused:?}"
    );
    // Successful ones too: the address limit bounds the hashing a client causes.
    let other = limiter.attempt(Some(&at("10.0.0.2")), "e", None).await.unwrap();
    assert_eq!(other, Attempt::Allowed);
    limiter.succeeded("e").await.unwrap();
}

async fn a_names_own_logins_never_lock_it(fx: Fixture) {
    // Before: 11 logins a minute, right or wrong, locked the name for everyone.
    let limiter = limiter(&fx, 1_000, 3, Duration::from_secs(6));
    for i in 0..10 {
        let attempt = limiter.attempt(Some(&at(&format!("10.0.1.{i}"))), "bob", None).await.unwrap();
        assert_eq!(attempt, Attempt::Allowed, "login {i}");
        limiter.succeeded("bob").await.unwrap();
    }
}

async fn failures_slow_a_name_down_to_one_try_per_interval(fx: Fixture) {
    let slow = Duration::from_millis(400);
    let limiter = limiter(&fx, 1_000, 3, slow);
    for i in 0..3 {
        assert_eq!(fail(&limiter, &format!("10.0.2.{i}"), "alice").await, Attempt::Allowed);
    }
    // At the limit, from any address, in any case: refused for at most the interval.
    let refused = limiter.attempt(Some(&at("10.0.2.9")), " ALICE ", None).await.unwrap();
    assert!(
        matches!(refused, Attempt::Refused { retry_after } if retry_after <= slow),
        "{refused:?}"
    );
    // Then one try gets through, and the next waits again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let through = loop {
        let attempt = limiter.attempt(Some(&at("10.0.2.10")), "alice", None).await.unwrap();
        if attempt == Attempt::Allowed {
            break Instant::now();
        }
        assert!(Instant::now() < deadline, "the slow-down never let a try through");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    limiter.failed("alice", None).await.unwrap();
    if through.elapsed() < slow / 2 {
        assert!(matches!(
            limiter.attempt(Some(&at("10.0.2.11")), "alice", None).await.unwrap(),
            Attempt::Refused { .. }
        ));
    }
    // Other names are not affected.
    assert_eq!(fail(&limiter, "10.0.2.12", "carol").await, Attempt::Allowed);
}

async fn a_device_cookie_lets_its_own_account_through_a_locked_name(fx: Fixture) {
    let limiter = limiter(&fx, 1_000, 2, Duration::from_secs(60));
    // Bob logged in from this browser once.
    assert_eq!(limiter.attempt(Some(&at("10.0.3.1")), "bob", None).await.unwrap(), Attempt::Allowed);
    let device = limiter.succeeded("bob").await.unwrap();
    // An attacker fills bob's limit and takes the slow-down's slot.
    for i in 0..3 {
        fail(&limiter, &format!("10.0.3.{}", 10 + i), "bob").await;
    }
    assert!(matches!(
        limiter.attempt(Some(&at("10.0.3.20")), "bob", None).await.unwrap(),
        Attempt::Refused { .. }
    ));
    // Bob's browser goes through, any case of the name.
    assert_eq!(
        limiter.attempt(Some(&at("10.0.3.1")), "Bob", Some(&device)).await.unwrap(),
        Attempt::Allowed
    );
    limiter.succeeded("bob").await.unwrap();
    // A device cookie is no licence to guess: its own failures count, and at the
    // limit it lets its holder through no more.
    for _ in 0..2 {
        assert_eq!(
            limiter.attempt(Some(&at("10.0.3.1")), "bob", Some(&device)).await.unwrap(),
            Attempt::Allowed
        );
        limiter.failed("bob", Some(&device)).await.unwrap();
    }
    assert!(matches!(
        limiter.attempt(Some(&at("10.0.3.1")), "bob", Some(&device)).await.unwrap(),
        Attempt::Refused { .. }
    ));
    // Another spelling of the same cookie is no fresh count: it is no cookie.
    let (issued, tag) = device.split_once('.').unwrap();
    for variant in [
        format!("{issued}.{}", tag.to_uppercase()),
        format!("0{issued}.{tag}"),
        format!("+{issued}.{tag}"),
    ] {
        assert!(!limiter.devices().recognises(&variant, "bob").await.unwrap(), "{variant}");
        assert!(matches!(
            limiter.attempt(Some(&at("10.0.3.1")), "bob", Some(&variant)).await.unwrap(),
            Attempt::Refused { .. }
        ));
    }
    // The cookie is bob's only; a changed one, or one of another shop, is nothing.
    fail(&limiter, "10.0.3.30", "carol").await;
    fail(&limiter, "10.0.3.31", "carol").await;
    fail(&limiter, "10.0.3.32", "carol").await;
    let mut forged = device.clone();
    forged.replace_range(0..1, if forged.starts_with('1') { "2" } else { "1" });
    let (issued, tag) = device.split_once('.').unwrap();
    let shifted = format!("{}.{tag}", issued.parse::<u64>().unwrap() - 1);
    for cookie in [device.as_str(), forged.as_str(), shifted.as_str(), "", "x.y", "1.zz"] {
        assert!(
            matches!(
                limiter.attempt(Some(&at("10.0.3.40")), "carol", Some(cookie)).await.unwrap(),
                Attempt::Refused { .. }
            ),
            "{cookie:?}"
        );
        assert!(!limiter.devices().recognises(cookie, "carol").await.unwrap());
    }
    assert!(limiter.devices().recognises(&device, "bob").await.unwrap());
    assert!(!limiter.devices().recognises(&shifted, "bob").await.unwrap());
    // A second limiter (another web server) shares the key.
    let other = LoginLimiter::new(fx.conn.clone(), fx.keys.clone(), LoginLimits::default());
    assert!(other.devices().recognises(&device, "bob").await.unwrap());
}
}
