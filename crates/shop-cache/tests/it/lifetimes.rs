//! Session lifetimes: the touch refuses, and the cleaner removes, a session idle
//! longer than its kind may be or logged in longer ago than a login lasts. Time is
//! moved by writing older times into `recent:` and `logins:`, as a session that
//! long idle (or logged in that long ago) would have them.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use shop_cache::cart::Carts;
use shop_cache::domain::{ItemId, UserId};
use shop_cache::session::{Lifetimes, SessionToken, Sessions, Touch, Touched};
use shop_cache::session_cleaner::{CleanerStep, SessionCleaner};

use crate::{Fixture, both_layouts};

const DAY: f64 = 24.0 * 3600.0;

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// Makes the session look last seen `days` ago.
async fn seen_days_ago(fx: &Fixture, t: &SessionToken, days: f64) {
    let mut raw = fx.raw().await;
    let at = now() - days * DAY;
    let _: () = raw
        .zadd(fx.keys.recent_of(t), t.expose(), at)
        .await
        .unwrap();
    let is_guest: Option<f64> = raw.zscore(fx.keys.guests_of(t), t.expose()).await.unwrap();
    if is_guest.is_some() {
        let _: () = raw
            .zadd(fx.keys.guests_of(t), t.expose(), at)
            .await
            .unwrap();
    }
}

/// Makes the session look logged in `days` ago.
async fn logged_in_days_ago(fx: &Fixture, t: &SessionToken, days: f64) {
    let _: () = fx
        .raw()
        .await
        .zadd(fx.keys.logins_of(t), t.expose(), now() - days * DAY)
        .await
        .unwrap();
}

/// A logged-in session of `user` with a viewed item and a cart line.
async fn shopper(fx: &Fixture, sessions: &Sessions, user: u64) -> SessionToken {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let t = sessions
        .login(&SessionToken::generate(), UserId::new(user).unwrap(), None)
        .await
        .unwrap();
    sessions
        .touch(&t, Touch::request().view(item(1)))
        .await
        .unwrap();
    carts.set(&t, item(2), 1).await.unwrap();
    t
}

/// Keys or entries of the session left anywhere: its own keys, and its entries in
/// `recent:`, `guests:`, `login:` and `logins:`.
async fn traces(fx: &Fixture, t: &SessionToken) -> Vec<&'static str> {
    let mut raw = fx.raw().await;
    let m = t.expose();
    let mut found = Vec::new();
    let own: u64 = raw
        .exists(&[fx.keys.viewed_by(t), fx.keys.cart(t)])
        .await
        .unwrap();
    if own > 0 {
        found.push("own keys");
    }
    for (name, key) in [
        ("recent:", fx.keys.recent_of(t)),
        ("guests:", fx.keys.guests_of(t)),
        ("logins:", fx.keys.logins_of(t)),
    ] {
        let s: Option<f64> = raw.zscore(key, m).await.unwrap();
        if s.is_some() {
            found.push(name);
        }
    }
    let user: Option<String> = raw.hget(fx.keys.login_of(t), m).await.unwrap();
    if user.is_some() {
        found.push("login:");
    }
    found
}

both_layouts! {
async fn the_touch_refuses_a_session_past_its_lifetime_and_removes_all_of_it(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let user = Some(UserId::new(7).unwrap());

    // Idle 31 days with a login (default: 30): expired, every trace gone.
    let idle = shopper(&fx, &sessions, 7).await;
    seen_days_ago(&fx, &idle, 31.0).await;
    assert_eq!(sessions.touch(&idle, Touch::request()).await.unwrap(), Touched::Expired);
    assert_eq!(traces(&fx, &idle).await, Vec::<&str>::new());
    assert_eq!(sessions.check_token(&idle).await.unwrap(), None);
    // The same token again is a fresh guest session, with nothing of the old one.
    assert_eq!(
        sessions.touch(&idle, Touch::request()).await.unwrap(),
        Touched::Started(None)
    );
    assert_eq!(sessions.recently_viewed(&idle).await.unwrap(), vec![]);

    // Seen just now but logged in 91 days ago (default: 90): expired.
    let old_login = shopper(&fx, &sessions, 7).await;
    logged_in_days_ago(&fx, &old_login, 91.0).await;
    assert_eq!(
        sessions.touch(&old_login, Touch::request().view(item(3))).await.unwrap(),
        Touched::Expired
    );
    assert_eq!(traces(&fx, &old_login).await, Vec::<&str>::new());

    // Within both: kept, and the touch makes it seen now.
    let fine = shopper(&fx, &sessions, 7).await;
    seen_days_ago(&fx, &fine, 29.0).await;
    logged_in_days_ago(&fx, &fine, 89.0).await;
    assert_eq!(sessions.touch(&fine, Touch::request()).await.unwrap(), Touched::Known(user));
    assert_eq!(sessions.touch(&fine, Touch::request()).await.unwrap(), Touched::Known(user));

    // A guest: a day (default); a cart without a login: 30 days.
    let guest = SessionToken::generate();
    sessions.touch(&guest, Touch::request()).await.unwrap();
    seen_days_ago(&fx, &guest, 0.9).await;
    assert_eq!(sessions.touch(&guest, Touch::request()).await.unwrap(), Touched::Known(None));
    seen_days_ago(&fx, &guest, 1.1).await;
    assert_eq!(sessions.touch(&guest, Touch::request()).await.unwrap(), Touched::Expired);
    assert_eq!(traces(&fx, &guest).await, Vec::<&str>::new());

    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let cart = SessionToken::generate();
    carts.set(&cart, item(4), 1).await.unwrap();
    seen_days_ago(&fx, &cart, 2.0).await;
    assert_eq!(sessions.touch(&cart, Touch::request()).await.unwrap(), Touched::Known(None));
    seen_days_ago(&fx, &cart, 31.0).await;
    assert_eq!(sessions.touch(&cart, Touch::request()).await.unwrap(), Touched::Expired);
    assert_eq!(traces(&fx, &cart).await, Vec::<&str>::new());
}

async fn configured_lifetimes_are_the_ones_enforced(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone()).with_lifetimes(Lifetimes {
        idle: Duration::from_secs(3600),
        guest_idle: Duration::from_secs(600),
        absolute: Duration::from_secs(7200),
    });
    let t = shopper(&fx, &sessions, 3).await;
    seen_days_ago(&fx, &t, 0.03).await; // 43 minutes
    assert!(matches!(sessions.touch(&t, Touch::request()).await.unwrap(), Touched::Known(Some(_))));
    logged_in_days_ago(&fx, &t, 0.09).await; // 2 h 10 min
    assert_eq!(sessions.touch(&t, Touch::request()).await.unwrap(), Touched::Expired);
    let guest = SessionToken::generate();
    sessions.touch(&guest, Touch::request()).await.unwrap();
    seen_days_ago(&fx, &guest, 0.008).await; // 11.5 minutes
    assert_eq!(sessions.touch(&guest, Touch::request()).await.unwrap(), Touched::Expired);
}

async fn a_login_written_by_the_books_code_gets_its_login_time_at_the_first_touch(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let t = SessionToken::generate();
    // The book's update_token: login: and recent: only.
    let mut raw = fx.raw().await;
    let _: () = raw.hset(fx.keys.login_of(&t), t.expose(), 11).await.unwrap();
    let _: () = raw.zadd(fx.keys.recent_of(&t), t.expose(), now()).await.unwrap();
    assert_eq!(
        sessions.touch(&t, Touch::request()).await.unwrap(),
        Touched::Known(Some(UserId::new(11).unwrap()))
    );
    let since: Option<f64> = raw.zscore(fx.keys.logins_of(&t), t.expose()).await.unwrap();
    assert!((now() - since.expect("a login time")).abs() < 60.0);
}

async fn the_cleaner_removes_expired_sessions_whatever_the_cap(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let idle = shopper(&fx, &sessions, 1).await;
    let old_login = shopper(&fx, &sessions, 2).await;
    let cart_only = SessionToken::generate();
    Carts::new(fx.conn.clone(), fx.keys.clone(), 99)
        .set(&cart_only, item(5), 1)
        .await
        .unwrap();
    let active = shopper(&fx, &sessions, 3).await;
    let guest = SessionToken::generate();
    sessions.touch(&guest, Touch::request()).await.unwrap();
    seen_days_ago(&fx, &idle, 31.0).await;
    logged_in_days_ago(&fx, &old_login, 91.0).await;
    seen_days_ago(&fx, &cart_only, 31.0).await;
    logged_in_days_ago(&fx, &active, 89.0).await;
    // A login time whose session the book's code removed: dropped, not a removal.
    let gone = SessionToken::generate();
    logged_in_days_ago(&fx, &gone, 100.0).await;

    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 1_000_000, 100).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(3));
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);
    for t in [&idle, &old_login, &cart_only, &gone] {
        assert_eq!(traces(&fx, t).await, Vec::<&str>::new(), "expired");
    }
    assert_eq!(traces(&fx, &active).await.len(), 4, "own keys, recent:, logins:, login:");
    assert_eq!(traces(&fx, &guest).await, vec!["recent:", "guests:"]);
    let live: HashSet<String> = {
        let mut raw = fx.raw().await;
        let mut all = HashSet::new();
        for shard in fx.keys.shards() {
            let m: Vec<String> = raw.zrange(fx.keys.recent_in(shard), 0, -1).await.unwrap();
            all.extend(m);
        }
        all
    };
    assert_eq!(
        live,
        HashSet::from([active.expose().to_owned(), guest.expose().to_owned()])
    );
}

async fn a_session_seen_again_after_a_long_idle_is_kept(fx: Fixture) {
    // Idle 31 days, then seen again by a server configured with a longer idle
    // time: the cleaner judges by the last visit, so nothing is removed.
    let lenient = Sessions::new(fx.conn.clone(), fx.keys.clone()).with_lifetimes(Lifetimes {
        idle: Duration::from_secs(100 * 86_400),
        ..Lifetimes::default()
    });
    let t = shopper(&fx, &lenient, 4).await;
    seen_days_ago(&fx, &t, 31.0).await;
    lenient.touch(&t, Touch::request()).await.unwrap();
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 1_000_000, 100).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);
    assert_eq!(traces(&fx, &t).await.len(), 4);
}
}
