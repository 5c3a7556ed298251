//! Tests of the breaker and the slot split.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{Arg, ErrorKind, RedisError};

use crate::CacheError;

use super::breaker::*;
use super::slots::*;

fn io_error() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
}

/// A breaker whose back-off is long enough never to end during a test: the
/// back-off's end is simulated with [`expire`].
fn breaker() -> Breaker {
    Breaker::new(Duration::from_secs(600))
}

fn expire(b: &Breaker) {
    b.open_until_ms.store(1, Ordering::Release);
}

fn trip(b: &Breaker) {
    b.admit().unwrap().record(Some(&io_error()));
}

#[test]
fn opens_on_unreachable_and_fails_fast_until_the_backoff_ends() {
    let b = breaker();
    trip(&b);
    let fast = b.admit().expect_err("open: fail fast");
    assert!(CacheError::from(fast).is_failing_fast());
    assert!(!CacheError::from(io_error()).is_failing_fast());
    assert_eq!(b.trips.load(Ordering::Relaxed), 1);
    expire(&b);
    let probe = b.admit().expect("a probe after the back-off");
    assert!(probe.probe);
    assert!(b.admit().is_err(), "one probe at a time");
    probe.record(None);
    assert!(b.admit().is_ok(), "closed after a good probe");
    assert_eq!(b.open_until_ms.load(Ordering::Relaxed), 0);
}

#[test]
fn a_failed_probe_opens_it_again() {
    let b = breaker();
    trip(&b);
    expire(&b);
    b.admit().unwrap().record(Some(&io_error()));
    assert!(b.admit().is_err());
    assert_eq!(b.trips.load(Ordering::Relaxed), 1, "still the same outage");
}

#[test]
fn answers_that_are_errors_do_not_open_it() {
    let b = breaker();
    let wrong_type = RedisError::from((ErrorKind::UnexpectedReturnType, "x"));
    b.admit().unwrap().record(Some(&wrong_type));
    assert!(b.admit().is_ok());
}

#[test]
fn a_probe_given_up_on_lets_the_next_one_go() {
    let b = breaker();
    trip(&b);
    expire(&b);
    let probe = b.admit().unwrap();
    // The caller's future is dropped mid-command: nothing is recorded.
    drop(probe);
    let next = b.admit().expect("another probe, not a breaker stuck open");
    assert!(next.probe);
}

#[test]
fn commands_are_routed_by_their_first_key() {
    let mut get = redis::cmd("GET");
    get.arg("cache:x");
    assert_eq!(first_key(&get), Some(&b"cache:x"[..]));
    let mut eval = redis::cmd("EVALSHA");
    eval.arg("abc")
        .arg(2)
        .arg("recent:{s1}")
        .arg("login:{s1}")
        .arg("v");
    assert_eq!(first_key(&eval), Some(&b"recent:{s1}"[..]));
    let mut keyless = redis::cmd("EVALSHA");
    keyless.arg("abc").arg(0).arg("v");
    assert_eq!(first_key(&keyless), None);
    assert_eq!(first_key(&redis::cmd("TIME")), None);
}

#[test]
fn a_pipeline_over_several_slots_is_split_keeping_order_within_each() {
    let mut one_slot = redis::pipe();
    one_slot.get("a{t}").get("b{t}").cmd("TIME");
    assert!(
        split_by_slot(&one_slot).is_none(),
        "one slot: sent as it is"
    );

    let mut pipe = redis::pipe();
    pipe.cmd("TIME")
        .get("a{t}")
        .get("other")
        .set("b{t}", 1)
        .get("other");
    let parts = split_by_slot(&pipe).expect("two slots");
    assert_eq!(parts.len(), 2);
    assert_eq!(
        parts[0].positions,
        vec![0, 1, 3],
        "TIME joins the first slot"
    );
    assert_eq!(parts[1].positions, vec![2, 4]);
    let names: Vec<Vec<u8>> = parts[0]
        .pipeline
        .cmd_iter()
        .map(|c| match c.args_iter().next() {
            Some(Arg::Simple(n)) => n.to_vec(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(
        names,
        vec![b"TIME".to_vec(), b"GET".to_vec(), b"SET".to_vec()]
    );
}

#[test]
fn late_answers_from_before_a_change_do_not_flip_it() {
    let b = breaker();
    let slow_success = b.admit().unwrap();
    let slow_failure = b.admit().unwrap();
    trip(&b);
    slow_success.record(None);
    assert!(b.admit().is_err(), "a success sent before the outage");
    expire(&b);
    b.admit().unwrap().record(None);
    assert!(b.admit().is_ok(), "closed by the probe");
    slow_failure.record(Some(&io_error()));
    assert!(b.admit().is_ok(), "a failure sent before the recovery");
    assert_eq!(b.trips.load(Ordering::Relaxed), 1);
}

#[test]
fn misses_from_before_a_change_do_not_count_toward_the_next_opening() {
    let b = breaker();
    let miss = || RedisError::from(std::io::Error::other(super::BudgetExceeded));
    // Commands sent before an outage, answered (missed) after the recovery.
    let late: Vec<_> = (0..MISSES_TO_OPEN).map(|_| b.admit().unwrap()).collect();
    trip(&b);
    expire(&b);
    b.admit().unwrap().record(None);
    for admitted in late {
        admitted.record(Some(&miss()));
    }
    b.admit().unwrap().record(Some(&miss()));
    assert!(b.admit().is_ok(), "one miss of now does not open it");
    for _ in 1..MISSES_TO_OPEN {
        b.admit().unwrap().record(Some(&miss()));
    }
    assert!(b.admit().is_err(), "{MISSES_TO_OPEN} misses of now do");
    assert_eq!(b.trips.load(Ordering::Relaxed), 2);
}

/// A cluster node's breaker, open, its back-off over: the next command is its
/// probe.
fn probing(node: &str) -> Breaker {
    let b = Breaker::new(Duration::from_secs(600)).naming(node);
    trip(&b);
    expire(&b);
    b
}

#[tokio::test]
async fn a_probe_of_a_node_whose_connection_waits_is_not_sent() {
    let budget = Some(Duration::from_millis(200));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A host gone: the connection waits, for the budget at most.
    let gone = shop_testkit::DeadHost::at(&format!("127.0.0.1:{port}"));
    let waits = probing(&format!("127.0.0.1:{port}"));
    let began = std::time::Instant::now();
    let fast = waits.admit_checked(budget).await.expect_err("not admitted");
    assert!(began.elapsed() >= Duration::from_millis(200));
    assert!(CacheError::from(fast).is_failing_fast());
    assert!(waits.admit().is_err(), "open for another back-off");
    assert!(
        !waits.probing.load(Ordering::Acquire),
        "no probe left in flight"
    );
    assert_eq!(waits.trips.load(Ordering::Relaxed), 1, "the same outage");
    drop(gone);
    // A process gone (refused at once): the command is the probe, as before.
    let refused = probing(&format!("127.0.0.1:{port}"));
    assert!(refused.admit_checked(budget).await.unwrap().probe);
    // A node that takes the connection: the command is the probe.
    let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = probing(&listening.local_addr().unwrap().to_string());
    let probe = open.admit_checked(budget).await.expect("admitted");
    assert!(probe.probe);
    probe.record(None);
    assert!(open.admit().is_ok(), "closed by the probe");
    // No address to connect to (an empty host: the answering node's), and a
    // one-node handle's breaker (no node named): admitted as before.
    for b in [probing(":7000"), breaker()] {
        if b.node.is_none() {
            trip(&b);
            expire(&b);
        }
        assert!(b.admit_checked(budget).await.unwrap().probe);
    }
}

#[test]
fn a_node_gone_is_unanswered_an_error_it_answered_is_not() {
    let budget = RedisError::from(std::io::Error::other(super::BudgetExceeded));
    for unanswered in [io_error(), budget, crate::error::FailingFast::redis_error()] {
        assert!(CacheError::from(unanswered).is_unanswered());
    }
    // Up, but loading its data set: it serves nothing yet.
    let loading = RedisError::from((
        ErrorKind::Server(redis::ServerErrorKind::BusyLoading),
        "LOADING Redis is loading the dataset in memory",
    ));
    assert!(CacheError::from(loading).is_unanswered());
    for answered in [
        RedisError::from((ErrorKind::AuthenticationFailed, "wrong password")),
        RedisError::from((ErrorKind::UnexpectedReturnType, "x")),
    ] {
        assert!(!CacheError::from(answered).is_unanswered());
    }
}
