//! Each user's index of sessions: listed at login, unlisted by every path that
//! ends a session (logout, the cleaner, an expired touch, ending from the devices
//! page), exact on both layouts; the cap per user; leftovers repaired.

use redis::AsyncCommands;
use shop_cache::domain::UserId;
use shop_cache::session::{Device, SessionToken, Sessions, Touch, Touched, session_id};
use shop_cache::session_cleaner::SessionCleaner;

use crate::{Fixture, both_layouts};

fn user(n: u64) -> UserId {
    UserId::new(n).unwrap()
}

fn device(agent: &str) -> Device {
    Device {
        user_agent: agent.to_owned(),
        network: "203.0.113.0/24".to_owned(),
    }
}

/// `n` logins of `who`, each from a fresh browser.
async fn logins(sessions: &Sessions, who: UserId, n: usize) -> Vec<SessionToken> {
    let mut out = Vec::new();
    for i in 0..n {
        let t = sessions
            .login_from(
                &SessionToken::generate(),
                who,
                None,
                &device(&format!("agent {i}")),
            )
            .await
            .unwrap();
        out.push(t);
    }
    out
}

/// How many entries the user's index holds, live or not.
async fn entries(fx: &Fixture, who: UserId) -> usize {
    fx.raw()
        .await
        .hlen(fx.keys.user_sessions(who))
        .await
        .unwrap()
}

/// The ids the listing shows.
async fn listed(sessions: &Sessions, who: UserId) -> Vec<String> {
    let mut ids: Vec<String> = sessions
        .sessions_of(who)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids
}

fn ids(tokens: &[&SessionToken]) -> Vec<String> {
    let mut ids: Vec<String> = tokens.iter().map(|t| session_id(t)).collect();
    ids.sort();
    ids
}

both_layouts! {
async fn every_login_is_listed_and_every_way_of_ending_unlists_it(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let alice = user(7);
    let t = logins(&sessions, alice, 4).await;
    let list = sessions.sessions_of(alice).await.unwrap();
    assert_eq!(list.len(), 4);
    assert!(list.iter().all(|s| s.device.network == "203.0.113.0/24"));
    assert!(list.iter().any(|s| s.is(&t[2]) && s.device.user_agent == "agent 2"));
    // Logout.
    sessions.logout(&t[0]).await.unwrap();
    assert_eq!(listed(&sessions, alice).await, ids(&[&t[1], &t[2], &t[3]]));
    // An expired token at the touch (logged in 91 days ago).
    let long_ago = shop_cache_now() - 91.0 * 86_400.0;
    let _: () = fx
        .raw()
        .await
        .zadd(fx.keys.logins_of(&t[1]), t[1].expose(), long_ago)
        .await
        .unwrap();
    assert_eq!(sessions.touch(&t[1], Touch::request()).await.unwrap(), Touched::Expired);
    assert_eq!(listed(&sessions, alice).await, ids(&[&t[2], &t[3]]));
    // Logging in again from a logged-in browser: the old token's entry goes.
    let again = sessions.login(&t[2], alice, None).await.unwrap();
    assert_eq!(listed(&sessions, alice).await, ids(&[&again, &t[3]]));
    // Another user logging in on alice's browser ends alice's session there.
    let bob = user(8);
    let bobs = sessions.login(&t[3], bob, None).await.unwrap();
    assert_eq!(listed(&sessions, alice).await, ids(&[&again]));
    assert_eq!(listed(&sessions, bob).await, ids(&[&bobs]));
    // The cleaner (a cap of none): every session goes, and every entry with it.
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 100).unwrap();
    while cleaner.step().await.unwrap() != shop_cache::session_cleaner::CleanerStep::Idle {}
    assert_eq!(sessions.count().await.unwrap(), 0);
    assert_eq!(entries(&fx, alice).await, 0, "the cleaner left no entry behind");
    assert_eq!(entries(&fx, bob).await, 0);
}

async fn ending_others_leaves_only_the_current_session(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = shop_cache::cart::Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let alice = user(3);
    let t = logins(&sessions, alice, 5).await;
    for token in &t {
        carts.set(token, shop_cache::domain::ItemId::new(1).unwrap(), 1).await.unwrap();
    }
    let bob = logins(&sessions, user(4), 1).await;
    assert_eq!(sessions.end_others(alice, Some(&t[2])).await.unwrap(), 4);
    assert_eq!(listed(&sessions, alice).await, ids(&[&t[2]]));
    for (i, token) in t.iter().enumerate() {
        let expect = (i == 2).then_some(alice);
        assert_eq!(sessions.check_token(token).await.unwrap(), expect, "{i}");
        // Ended as logout ends: the cart is gone with it.
        assert_eq!(carts.get(token).await.unwrap().is_empty(), i != 2, "{i}");
    }
    assert_eq!(sessions.check_token(&bob[0]).await.unwrap(), Some(user(4)), "bob is not alice");
    // One by id; an unknown id ends nothing.
    assert!(!sessions.end_session(alice, "0123456789abcdef01234567").await.unwrap());
    assert!(sessions.end_session(alice, &session_id(&t[2])).await.unwrap());
    assert_eq!(sessions.check_token(&t[2]).await.unwrap(), None);
    assert_eq!(entries(&fx, alice).await, 0);
    // Bob's session id does not end bob's session through alice.
    assert!(!sessions.end_session(alice, &session_id(&bob[0])).await.unwrap());
    assert_eq!(sessions.check_token(&bob[0]).await.unwrap(), Some(user(4)));
}

async fn a_login_past_the_cap_per_user_ends_the_least_recently_seen(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone()).with_max_per_user(3);
    let carol = user(5);
    let t = logins(&sessions, carol, 3).await;
    // t[0] was seen last; t[1] has been idle longest.
    let mut raw = fx.raw().await;
    let now = shop_cache_now();
    for (token, ago) in [(&t[0], 1.0), (&t[1], 300.0), (&t[2], 100.0)] {
        let _: () = raw.zadd(fx.keys.recent_of(token), token.expose(), now - ago).await.unwrap();
    }
    let fourth = logins(&sessions, carol, 1).await.remove(0);
    assert_eq!(listed(&sessions, carol).await, ids(&[&t[0], &t[2], &fourth]));
    assert_eq!(sessions.check_token(&t[1]).await.unwrap(), None);
    assert_eq!(sessions.check_token(&fourth).await.unwrap(), Some(carol));
}

async fn leftovers_of_a_crash_are_dropped_when_listed_and_logins_in_flight_are_not(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let dave = user(6);
    let live = logins(&sessions, dave, 1).await;
    let mut raw = fx.raw().await;
    // A crash between "session removed" and "entry removed": an entry an hour old
    // whose token is no session. And a login between its two writes: an entry of a
    // second ago whose session is not there yet.
    let dead = SessionToken::generate();
    let pending = SessionToken::generate();
    let now = shop_cache_now();
    for (token, at) in [(&dead, now - 3_600.0), (&pending, now - 1.0)] {
        let _: () = raw
            .hset(
                fx.keys.user_sessions(dave),
                session_id(token),
                format!("{}\t{at:.3}\t\tcurl/8", token.expose()),
            )
            .await
            .unwrap();
    }
    // Garbage in the index is a leftover too.
    let _: () = raw.hset(fx.keys.user_sessions(dave), "junk", "not an entry").await.unwrap();
    assert_eq!(listed(&sessions, dave).await, ids(&[&live[0]]));
    let left: Vec<String> = raw.hkeys(fx.keys.user_sessions(dave)).await.unwrap();
    let mut left = left;
    left.sort();
    assert_eq!(left, ids(&[&live[0], &pending]), "the leftover went, the login in flight stayed");
    // "Log out everywhere" ends the live session, and leaves the entry of the
    // login in flight (its session, about to go live, stays listed).
    assert_eq!(sessions.end_others(dave, None).await.unwrap(), 1);
    assert_eq!(sessions.check_token(&live[0]).await.unwrap(), None);
    let left: Vec<String> = raw.hkeys(fx.keys.user_sessions(dave)).await.unwrap();
    assert_eq!(left, vec![session_id(&pending)]);
    // Ending it by id before it is live does not take its entry either.
    assert!(!sessions.end_session(dave, &session_id(&pending)).await.unwrap());
    let left: Vec<String> = raw.hkeys(fx.keys.user_sessions(dave)).await.unwrap();
    assert_eq!(left, vec![session_id(&pending)]);
}

async fn an_upgrade_lists_the_logged_in_sessions_of_before(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let erin = user(9);
    let old = logged_in_before_the_index(&fx, 9, 3).await;
    let guest = SessionToken::generate();
    sessions.touch(&guest, Touch::request()).await.unwrap();
    let new = logins(&sessions, erin, 1).await;
    assert_eq!(listed(&sessions, erin).await, ids(&[&new[0]]), "before: unlisted");
    assert_eq!(sessions.index_logins().await.unwrap(), 3);
    assert_eq!(sessions.index_logins().await.unwrap(), 0, "once");
    assert_eq!(listed(&sessions, erin).await, ids(&[&old[0], &old[1], &old[2], &new[0]]));
    // Now "log out everywhere" reaches them.
    assert_eq!(sessions.end_others(erin, Some(&new[0])).await.unwrap(), 3);
    for t in &old {
        assert_eq!(sessions.check_token(t).await.unwrap(), None);
    }
}

async fn sessions_listed_by_an_upgrade_leave_the_index_with_the_cleaner(fx: Fixture) {
    // The cleaner takes out of the users' indexes the sessions with a login time
    // (the book's own logins have none, and no entry); the upgrade gives one to
    // each session it lists.
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let frank = user(10);
    logged_in_before_the_index(&fx, 10, 3).await;
    assert_eq!(sessions.index_logins().await.unwrap(), 3);
    assert_eq!(entries(&fx, frank).await, 3);
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 100).unwrap();
    while cleaner.step().await.unwrap() != shop_cache::session_cleaner::CleanerStep::Idle {}
    assert_eq!(sessions.count().await.unwrap(), 0);
    assert_eq!(entries(&fx, frank).await, 0, "the cleaner left no entry behind");
}
}

/// `n` sessions of user `id` logged in by a build without the index: `login:` and
/// `recent:` only.
async fn logged_in_before_the_index(fx: &Fixture, id: u64, n: usize) -> Vec<SessionToken> {
    let mut raw = fx.raw().await;
    let old: Vec<SessionToken> = (0..n).map(|_| SessionToken::generate()).collect();
    for t in &old {
        let _: () = raw.hset(fx.keys.login_of(t), t.expose(), id).await.unwrap();
        let _: () = raw
            .zadd(fx.keys.recent_of(t), t.expose(), shop_cache_now())
            .await
            .unwrap();
    }
    old
}

/// Unix time now, as the shop's scripts see it (the test and Redis share a clock).
fn shop_cache_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}
