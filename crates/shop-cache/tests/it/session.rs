use redis::AsyncCommands;
use shop_cache::cart::{CartOf, Carts};
use shop_cache::domain::{ItemId, UserId};
use shop_cache::session::{HISTORY_LEN, Holdings, SessionToken, Sessions, Touch, Touched};

use crate::{both_layouts, redis};

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

both_layouts! {
async fn touch_records_last_seen_and_login(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let guest = SessionToken::generate();
    let user = SessionToken::generate();
    assert_eq!(
        sessions.touch(&guest, Touch::request()).await.unwrap(),
        Touched::Started(None)
    );
    assert_eq!(
        sessions.touch(&guest, Touch::request()).await.unwrap(),
        Touched::Known(None)
    );
    let user_id = UserId::new(42).unwrap();
    let id = Some(user_id);
    let as_user = Touch::request().as_user(user_id);
    assert_eq!(
        sessions.touch(&user, as_user).await.unwrap(),
        Touched::Started(id)
    );
    // A later touch without a user still reports who the token belongs to.
    assert_eq!(
        sessions.touch(&user, Touch::request()).await.unwrap(),
        Touched::Known(id)
    );

    let mut raw = fx.raw().await;
    let seen: Option<f64> = raw.zscore(fx.keys.recent_of(&guest), guest.expose()).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - seen.unwrap()).abs() < 5.0, "recent: holds unix time");
    assert_eq!(sessions.check_token(&guest).await.unwrap(), None);
    assert_eq!(
        sessions.check_token(&user).await.unwrap(),
        Some(UserId::new(42).unwrap())
    );
    assert_eq!(sessions.count().await.unwrap(), 2);
    // A request that is not an item view records no view.
    let mut index = vec![
        fx.keys.login_of(&user).to_owned(),
        fx.keys.recent_of(&user).to_owned(),
        fx.keys.recent_of(&guest).to_owned(),
        fx.keys.guests_of(&guest).to_owned(),
        // The login's time, which its absolute lifetime counts from.
        fx.keys.logins_of(&user).to_owned(),
    ];
    index.sort();
    index.dedup();
    assert_eq!(fx.all_keys().await, index);
}

async fn unknown_token_is_not_logged_in(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    assert_eq!(
        sessions
            .check_token(&SessionToken::generate())
            .await
            .unwrap(),
        None
    );
}

async fn each_view_decrements_the_global_count_by_one(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let a = SessionToken::generate();
    let b = SessionToken::generate();
    for _ in 0..3 {
        sessions.touch(&a, Touch::request().view(item(7))).await.unwrap();
    }
    sessions.touch(&b, Touch::request().view(item(7))).await.unwrap();
    sessions.touch(&b, Touch::request().view(item(8))).await.unwrap();

    // Batched in this process until flushed, in both layouts.
    let mut raw = fx.raw().await;
    let before: Option<f64> = raw.zscore(fx.keys.item_views(), "7").await.unwrap();
    assert_eq!(before, None, "not written before the flush");
    assert_eq!(sessions.pending_views(), 5);
    let flushed = sessions.flush_views().await.unwrap();
    assert_eq!(flushed, 5);
    assert_eq!(sessions.pending_views(), 0);
    let views = fx.keys.item_views();
    let seven: f64 = raw.zscore(views, "7").await.unwrap();
    let eight: f64 = raw.zscore(views, "8").await.unwrap();
    assert_eq!((seven, eight), (-4.0, -1.0));
    let ranked: Vec<String> = raw.zrange(views, 0, -1).await.unwrap();
    assert_eq!(ranked, vec!["7", "8"], "most viewed at rank 0");
}

async fn a_touch_reads_the_cart_and_history_in_its_round_trip(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let token = SessionToken::generate();
    // A token the shop does not know yet: started, holding nothing.
    assert_eq!(
        sessions.touch_and_read(&token, Touch::request()).await.unwrap(),
        (Touched::Started(None), Holdings::default())
    );
    for n in [5, 3, 9] {
        sessions.touch(&token, Touch::request().view(item(n))).await.unwrap();
    }
    carts.set(&token, item(7), 2).await.unwrap();
    carts.set(&token, item(1), 1).await.unwrap();
    let (touched, holdings) = sessions.touch_and_read(&token, Touch::request()).await.unwrap();
    assert_eq!(touched, Touched::Known(None));
    let lines: Vec<(u64, u32)> = holdings.cart.iter().map(|(i, q)| (i.get(), q.get())).collect();
    assert_eq!(lines, vec![(1, 1), (7, 2)], "the cart, by item");
    assert_eq!(holdings.viewed, vec![item(9), item(3), item(5)], "newest first");
    // The same as the separate reads.
    assert_eq!(holdings.viewed, sessions.recently_viewed(&token).await.unwrap());
    assert_eq!(holdings.cart, carts.get(&token).await.unwrap());
    // A plain touch reads nothing and says the same.
    assert_eq!(sessions.touch(&token, Touch::request()).await.unwrap(), Touched::Known(None));
}

/// A logged-in shopper's cart is the account's: on one node the peek reads it in
/// its own round trip once it has seen the session logged in, and hands it out
/// only while the session is still that user's.
async fn a_peek_reads_the_account_cart_of_a_session_it_saw_logged_in(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 10);
    let token = SessionToken::generate();
    let (alice, bob) = (UserId::new(42).unwrap(), UserId::new(43).unwrap());
    sessions.touch(&token, Touch::request().as_user(alice)).await.unwrap();
    carts.set(CartOf::Account(alice), item(7), 2).await.unwrap();
    carts.set(CartOf::Account(bob), item(9), 1).await.unwrap();
    // On a cluster the account's cart is on another slot: never read here.
    let account = |user: UserId, lines: &[(u64, u32)]| {
        (!fx.conn.is_cluster()).then(|| (user, lines.to_vec()))
    };
    let read = |holdings: Holdings| {
        holdings.account_cart.map(|(user, lines)| {
            (user, lines.iter().map(|(i, q)| (i.get(), q.get())).collect::<Vec<_>>())
        })
    };

    // Not known logged in yet: not read.
    let (user, holdings) = sessions.peek(&token, HISTORY_LEN).await.unwrap().unwrap();
    assert_eq!((user, read(holdings)), (Some(alice), None));
    let (user, holdings) = sessions.peek(&token, HISTORY_LEN).await.unwrap().unwrap();
    assert_eq!((user, read(holdings)), (Some(alice), account(alice, &[(7, 2)])));
    // A change is read, not remembered.
    carts.set(CartOf::Account(alice), item(8), 1).await.unwrap();
    let (_, holdings) = sessions.peek(&token, HISTORY_LEN).await.unwrap().unwrap();
    assert_eq!(read(holdings), account(alice, &[(7, 2), (8, 1)]));

    // The session now bob's: alice's cart, read on the guess, is not handed out.
    sessions.touch(&token, Touch::request().as_user(bob)).await.unwrap();
    let (user, holdings) = sessions.peek(&token, HISTORY_LEN).await.unwrap().unwrap();
    assert_eq!((user, read(holdings)), (Some(bob), None));
    let (_, holdings) = sessions.peek(&token, HISTORY_LEN).await.unwrap().unwrap();
    assert_eq!(read(holdings), account(bob, &[(9, 1)]));
}

async fn a_view_sent_ahead_counts_only_once_its_page_is_found(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let token = SessionToken::generate();
    // A token this process just made: the session starts with the view held.
    let touched = sessions.touch(&token, Touch::request().view_ahead(item(3))).await.unwrap();
    assert_eq!(touched, Touched::Started(None));
    assert_eq!(sessions.recently_viewed(&token).await.unwrap(), vec![item(3)]);
    assert_eq!(sessions.pending_views(), 0, "not counted before the answer");
    sessions.settle_view(&token, item(3), true).await.unwrap();
    assert_eq!(sessions.pending_views(), 1, "a found page counts");

    // A page that was not found: out of the history again, never counted.
    assert_eq!(
        sessions.touch(&token, Touch::request().view_ahead(item(999))).await.unwrap(),
        Touched::Known(None)
    );
    sessions.settle_view(&token, item(999), false).await.unwrap();
    assert_eq!(sessions.recently_viewed(&token).await.unwrap(), vec![item(3)]);
    assert_eq!(sessions.pending_views(), 1);
    sessions.flush_views().await.unwrap();
    let mut raw = fx.raw().await;
    let ranked: Vec<(u64, f64)> = raw
        .zrange_withscores(fx.keys.item_views(), 0, -1)
        .await
        .unwrap();
    assert_eq!(ranked, vec![(3, -1.0)]);

    // A view of a missing page by a session that starts with it: the session
    // stays, the view does not.
    let stranger = SessionToken::generate();
    assert_eq!(
        sessions.touch(&stranger, Touch::request().view_ahead(item(4))).await.unwrap(),
        Touched::Started(None)
    );
    sessions.settle_view(&stranger, item(4), false).await.unwrap();
    assert!(sessions.recently_viewed(&stranger).await.unwrap().is_empty());
}

async fn the_26th_view_drops_the_oldest(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let t = SessionToken::generate();
    for n in 1..=26 {
        sessions.touch(&t, Touch::request().view(item(n))).await.unwrap();
    }
    let viewed = sessions.recently_viewed(&t).await.unwrap();
    assert_eq!(viewed.len(), HISTORY_LEN);
    let expected: Vec<ItemId> = (2..=26).rev().map(item).collect();
    assert_eq!(viewed, expected, "most recent first, item 1 dropped");
    let size: u64 = fx
        .raw()
        .await
        .zcard(fx.keys.viewed_by(&t))
        .await
        .unwrap();
    assert_eq!(size, 25);
}

async fn views_in_the_same_second_keep_the_right_25(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let t = SessionToken::generate();
    // 40 views back to back land within one second: the order must hold (the scores
    // are sequence numbers, not times, so equal or backward clocks cannot reorder).
    let order = [
        5, 3, 9, 1, 7, 2, 8, 4, 6, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
        26, 27, 28, 29, 30, 3, 5, 31, 32, 33, 34, 35, 36, 37, 9,
    ];
    for &n in &order {
        sessions.touch(&t, Touch::request().view(item(n))).await.unwrap();
    }
    let scores: Vec<(u64, f64)> = fx
        .raw()
        .await
        .zrange_withscores(fx.keys.viewed_by(&t), 0, -1)
        .await
        .unwrap();
    // Each kept item is scored by the number of its latest view (1 = the first).
    assert_eq!(scores.len(), 25);
    for (item, score) in &scores {
        let latest = order.iter().rposition(|n| n == item).unwrap();
        assert_eq!(*score, (latest + 1) as f64, "item {item}");
    }
    // The expected history: the last 25 distinct items by their latest view.
    let mut expected: Vec<u64> = Vec::new();
    for &n in order.iter().rev() {
        if !expected.contains(&n) {
            expected.push(n);
        }
    }
    expected.truncate(25);
    let got: Vec<u64> = sessions
        .recently_viewed(&t)
        .await
        .unwrap()
        .into_iter()
        .map(ItemId::get)
        .collect();
    assert_eq!(got, expected);
}

async fn login_rotates_the_token_and_moves_cart_and_history(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = shop_cache::cart::Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let old = SessionToken::generate();
    sessions.touch(&old, Touch::request().view(item(3))).await.unwrap();
    sessions.touch(&old, Touch::request().view(item(4))).await.unwrap();
    carts.set(&old, item(3), 2).await.unwrap();

    let user = UserId::new(9).unwrap();
    let new = sessions.login(&old, user, None).await.unwrap();
    assert_ne!(new, old);

    assert_eq!(sessions.check_token(&new).await.unwrap(), Some(user));
    assert_eq!(sessions.check_token(&old).await.unwrap(), None);
    assert_eq!(
        sessions.recently_viewed(&new).await.unwrap(),
        vec![item(4), item(3)]
    );
    assert_eq!(sessions.recently_viewed(&old).await.unwrap(), vec![]);
    let lines = carts.get(&new).await.unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].0, lines[0].1.get()), (item(3), 2));
    assert!(carts.get(&old).await.unwrap().is_empty());

    // The old token is gone from every structure; only the new one remains.
    let mut raw = fx.raw().await;
    let recent: Vec<String> = raw.zrange(fx.keys.recent_of(&new), 0, -1).await.unwrap();
    assert_eq!(recent, vec![new.expose().to_owned()]);
    let keys = fx.all_keys().await;
    assert!(keys.iter().all(|k| !k.contains(old.expose())), "{keys:?}");
}

async fn login_from_an_empty_session_works(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let old = SessionToken::generate();
    let new = sessions
        .login(&old, UserId::new(1).unwrap(), None)
        .await
        .unwrap();
    assert_eq!(
        sessions.check_token(&new).await.unwrap(),
        Some(UserId::new(1).unwrap())
    );
}

async fn logout_removes_the_whole_session(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = shop_cache::cart::Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let other = SessionToken::generate();
    sessions.touch(&other, Touch::request().view(item(1))).await.unwrap();
    let t = sessions
        .login(&SessionToken::generate(), UserId::new(5).unwrap(), None)
        .await
        .unwrap();
    sessions.touch(&t, Touch::request().view(item(1))).await.unwrap();
    carts.set(&t, item(1), 1).await.unwrap();

    sessions.logout(&t).await.unwrap();
    assert_eq!(sessions.check_token(&t).await.unwrap(), None);
    let keys = fx.all_keys().await;
    assert!(keys.iter().all(|k| !k.contains(t.expose())), "{keys:?}");
    assert_eq!(
        sessions.count().await.unwrap(),
        1,
        "other sessions untouched"
    );
    assert_eq!(
        sessions.recently_viewed(&other).await.unwrap(),
        vec![item(1)]
    );
}

async fn a_touch_held_back_before_the_session_ended_does_not_bring_it_back(fx: Fixture) {
    // An item page's touch is written behind (the next flush); logout, ending
    // a session from the account page and login (the old token) come between.
    // Before, the flush wrote the old token back as a guest session with the
    // view in its history, readable with the old cookie.
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let mut raw = fx.raw().await;
    let alice = UserId::new(5).unwrap();
    let logged_out = sessions.login(&SessionToken::generate(), alice, None).await.unwrap();
    let ended = sessions.login(&SessionToken::generate(), alice, None).await.unwrap();
    let guest = SessionToken::generate();
    sessions.touch(&guest, Touch::request()).await.unwrap();
    for (t, n) in [(&logged_out, 8), (&ended, 9), (&guest, 10)] {
        assert!(sessions.touch_later(t, Some(item(n))));
    }
    sessions.logout(&logged_out).await.unwrap();
    let listed = sessions.sessions_of(alice).await.unwrap();
    let entry = listed.iter().find(|s| s.is(&ended)).expect("listed");
    assert!(sessions.end_session(alice, &entry.id).await.unwrap());
    let new = sessions.login(&guest, alice, None).await.unwrap();
    // A session that expires at a request's touch (idle two days, a guest).
    let idle = SessionToken::generate();
    sessions.touch(&idle, Touch::request()).await.unwrap();
    assert!(sessions.touch_later(&idle, Some(item(11))));
    let two_days_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 2.0 * 86_400.0;
    let _: () = raw.zadd(fx.keys.recent_of(&idle), idle.expose(), two_days_ago).await.unwrap();
    assert_eq!(sessions.touch(&idle, Touch::request()).await.unwrap(), Touched::Expired);
    assert_eq!(sessions.flush_touches().await.unwrap(), 4);
    for t in [&logged_out, &ended, &guest, &idle] {
        let seen: Option<f64> = raw.zscore(fx.keys.recent_of(t), t.expose()).await.unwrap();
        assert_eq!(seen, None, "no session under the ended token");
        assert!(sessions.recently_viewed(t).await.unwrap().is_empty());
    }
    assert_eq!(sessions.check_token(&new).await.unwrap(), Some(alice));
    // A request of now with an ended token starts an empty session, as any
    // unknown token does (no new cookie that could race a login's).
    assert_eq!(
        sessions.touch(&logged_out, Touch::request()).await.unwrap(),
        Touched::Started(None)
    );
    // ended: lists them, and each end trims what is older than ENDED_FOR.
    for t in [&ended, &guest] {
        let at: Option<f64> = raw.zscore(fx.keys.ended_of(t), t.expose()).await.unwrap();
        assert!(at.is_some(), "listed in ended:");
    }
    let stale = SessionToken::generate();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let long_ago = now - shop_cache::session::ENDED_FOR.as_secs_f64() - 10.0;
    let _: () = raw.zadd(fx.keys.ended_of(&stale), stale.expose(), long_ago).await.unwrap();
    let mut same_shard = SessionToken::generate();
    while fx.keys.shard_of(&same_shard) != fx.keys.shard_of(&stale) {
        same_shard = SessionToken::generate();
    }
    sessions.logout(&same_shard).await.unwrap();
    let at: Option<f64> = raw.zscore(fx.keys.ended_of(&stale), stale.expose()).await.unwrap();
    assert_eq!(at, None, "trimmed");
}

async fn a_returned_token_starts_a_guest_session_and_a_cart_or_login_ends_its_guesthood(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = shop_cache::cart::Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let mut raw = fx.raw().await;
    let keys = fx.keys.clone();
    let is_guest = async |raw: &mut shop_cache::RedisConn, t: &SessionToken| {
        let seen: Option<f64> = raw.zscore(keys.guests_of(t), t.expose()).await.unwrap();
        seen.is_some()
    };

    // A token the shop never saw (a first cookie coming back): a guest session.
    let t = SessionToken::generate();
    assert_eq!(
        sessions.touch(&t, Touch::request().view(item(1))).await.unwrap(),
        Touched::Started(None)
    );
    assert_eq!(sessions.recently_viewed(&t).await.unwrap(), vec![item(1)]);
    assert!(is_guest(&mut raw, &t).await);

    // A cart line makes it a shopper's session; emptying the cart, a guest again.
    carts.set(&t, item(2), 1).await.unwrap();
    assert!(!is_guest(&mut raw, &t).await, "a cart is no guest");
    sessions.touch(&t, Touch::request()).await.unwrap();
    assert!(!is_guest(&mut raw, &t).await, "a touch keeps it so");
    carts.set(&t, item(2), 0).await.unwrap();
    assert!(is_guest(&mut raw, &t).await, "no cart, no login: a guest at once");
    sessions.touch(&t, Touch::request()).await.unwrap();
    assert!(is_guest(&mut raw, &t).await, "and after its next request");

    // A cart line from a visitor with no session yet starts it, as a shopper.
    let first = SessionToken::generate();
    carts.set(&first, item(3), 2).await.unwrap();
    let seen: Option<f64> = raw.zscore(fx.keys.recent_of(&first), first.expose()).await.unwrap();
    assert!(seen.is_some(), "the cart's session exists for the cleaner to find");
    assert!(!is_guest(&mut raw, &first).await);

    // A login moves a guest to a logged-in token: neither is a guest.
    let user = UserId::new(5).unwrap();
    let new = sessions.login(&t, user, None).await.unwrap();
    assert!(!is_guest(&mut raw, &t).await && !is_guest(&mut raw, &new).await);
    sessions.touch(&new, Touch::request()).await.unwrap();
    assert!(!is_guest(&mut raw, &new).await, "logged in: no guest");

    // A login straight from a token that never started a session works too.
    let fresh = SessionToken::generate();
    let logged = sessions.login(&fresh, user, None).await.unwrap();
    assert_eq!(sessions.check_token(&logged).await.unwrap(), Some(user));

    // Logout removes a guest from both indexes.
    let g = SessionToken::generate();
    sessions.touch(&g, Touch::request()).await.unwrap();
    assert!(is_guest(&mut raw, &g).await);
    sessions.logout(&g).await.unwrap();
    assert!(!is_guest(&mut raw, &g).await);
    let seen: Option<f64> = raw.zscore(fx.keys.recent_of(&g), g.expose()).await.unwrap();
    assert_eq!(seen, None);
}

async fn a_double_submitted_login_logs_in_once_and_keeps_the_cart(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = shop_cache::cart::Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let guest = SessionToken::generate();
    sessions.touch(&guest, Touch::request()).await.unwrap();
    carts.set(&guest, item(3), 2).await.unwrap();
    let user = UserId::new(9).unwrap();

    let first = sessions.login(&guest, user, Some("form-1")).await.unwrap();
    // The second submit of the same form: the browser still sent the old cookie,
    // which no longer exists, so it arrives as a fresh guest session.
    let second_guest = SessionToken::generate();
    sessions.touch(&second_guest, Touch::request()).await.unwrap();
    let second = sessions
        .login(&second_guest, user, Some("form-1"))
        .await
        .unwrap();
    assert_eq!(second, first, "the same form logs in once");
    assert_eq!(carts.get(&first).await.unwrap().len(), 1, "cart kept");
    assert_eq!(sessions.check_token(&first).await.unwrap(), Some(user));

    // Another user with the same key gets a session of their own.
    let other = sessions
        .login(&second_guest, UserId::new(10).unwrap(), Some("form-1"))
        .await
        .unwrap();
    assert_ne!(other, first);
    // Without a key every login rotates.
    let again = sessions.login(&first, user, None).await.unwrap();
    assert_ne!(again, first);
    assert_eq!(carts.get(&again).await.unwrap().len(), 1, "cart moved on");
}

async fn logging_in_over_another_users_session_does_not_take_their_cart(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = shop_cache::cart::Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let alice = UserId::new(1).unwrap();
    let bob = UserId::new(2).unwrap();
    let a = sessions
        .login(&SessionToken::generate(), alice, None)
        .await
        .unwrap();
    sessions.touch(&a, Touch::request().view(item(7))).await.unwrap();
    carts.set(&a, item(7), 1).await.unwrap();

    let b = sessions.login(&a, bob, None).await.unwrap();
    assert_eq!(sessions.check_token(&b).await.unwrap(), Some(bob));
    assert!(
        carts.get(&b).await.unwrap().is_empty(),
        "alice's cart stays hers"
    );
    assert!(sessions.recently_viewed(&b).await.unwrap().is_empty());
    assert_eq!(sessions.check_token(&a).await.unwrap(), None);
    let keys = fx.all_keys().await;
    assert!(keys.iter().all(|k| !k.contains(a.expose())), "{keys:?}");

    // The same user logging in again keeps the cart.
    carts.set(&b, item(8), 1).await.unwrap();
    let b2 = sessions.login(&b, bob, None).await.unwrap();
    assert_eq!(carts.get(&b2).await.unwrap().len(), 1);
}

async fn item_viewers_are_counted_in_expiring_windows(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let t = SessionToken::generate();
    sessions.touch(&t, Touch::request().view(item(2))).await.unwrap();
    sessions.flush_views().await.unwrap();
    let window = shop_cache::insights::current_window();
    let key = fx.keys.viewers(item(2), window);
    let mut raw = fx.raw().await;
    let ttl: i64 = raw.ttl(&key).await.unwrap();
    let max = shop_cache::insights::WINDOW_TTL.as_secs() as i64;
    assert!(ttl > max - 60 && ttl <= max, "ttl {ttl}");
}

async fn scripts_are_loaded_again_after_a_script_flush(fx: Fixture) {
    // A node that never saw a script (a new node, a restarted one, a replica just
    // promoted) answers NOSCRIPT: the call loads it there and runs it again.
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let t = SessionToken::generate();
    sessions.touch(&t, Touch::request().view(item(1))).await.unwrap();
    let flushed: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut fx.raw().await)
        .await
        .unwrap();
    assert_eq!(flushed, "OK");
    let others: Vec<SessionToken> = (0..20).map(|_| SessionToken::generate()).collect();
    for other in &others {
        sessions.touch(other, Touch::request().view(item(2))).await.unwrap();
    }
    sessions.touch(&t, Touch::request().view(item(3))).await.unwrap();
    assert_eq!(
        sessions.recently_viewed(&t).await.unwrap(),
        vec![item(3), item(1)]
    );
}

async fn a_flush_given_up_on_mid_write_loses_no_view(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let t = SessionToken::generate();
    // The scripts loaded first, so the call given up on below runs.
    sessions.touch(&t, Touch::request().view(item(8))).await.unwrap();
    sessions.flush_views().await.unwrap();
    for _ in 0..3 {
        sessions.touch(&t, Touch::request().view(item(6))).await.unwrap();
    }
    // Polled once and dropped in flight, as the daemon loop drops a step at shutdown.
    use futures::FutureExt;
    let dropped = sessions.flush_views().now_or_never();
    assert!(dropped.is_none(), "still writing");
    sessions.flush_views().await.unwrap();
    assert_eq!(sessions.pending_views(), 0);
    let six: f64 = fx
        .raw()
        .await
        .zscore(fx.keys.item_views(), "6")
        .await
        .unwrap();
    // All three counted, once: the call given up on is sent again with its
    // number, and whichever copy runs second changes nothing.
    assert_eq!(six, -3.0);
}

async fn a_graceful_stop_writes_the_last_batch_of_views(fx: Fixture) {
    use shop_cache::session::ViewFlusher;
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let stop = tokio_util::sync::CancellationToken::new();
    let flusher = tokio::spawn(shop_cache::daemon::run(
        ViewFlusher::new(sessions.clone()),
        stop.clone(),
    ));
    // Counted by the loop's regular steps.
    let t = SessionToken::generate();
    sessions.touch(&t, Touch::request().view(item(4))).await.unwrap();
    tokio::time::sleep(shop_cache::session::VIEW_FLUSH_EVERY * 3).await;
    assert_eq!(sessions.pending_views(), 0);
    // Counted just before the stop: written by the last step, not lost.
    for _ in 0..3 {
        sessions.touch(&t, Touch::request().view(item(9))).await.unwrap();
    }
    stop.cancel();
    flusher.await.unwrap();
    assert_eq!(sessions.pending_views(), 0);
    let mut raw = fx.raw().await;
    let four: f64 = raw.zscore(fx.keys.item_views(), "4").await.unwrap();
    let nine: f64 = raw.zscore(fx.keys.item_views(), "9").await.unwrap();
    assert_eq!((four, nine), (-1.0, -3.0));
}

async fn a_step_dropped_at_shutdown_counts_its_views_once(fx: Fixture) {
    use shop_cache::daemon::Daemon;
    use shop_cache::session::ViewFlusher;
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let mut flusher = ViewFlusher::new(sessions.clone());
    let t = SessionToken::generate();
    for _ in 0..3 {
        sessions.touch(&t, Touch::request().view(item(7))).await.unwrap();
    }
    // Every node holds its clients' commands for a while: the step's write is
    // sent and waits; the step is dropped meanwhile, as the daemon loop drops a
    // step in flight at shutdown; then the loop's last step runs. Dropping the
    // step must not put its views back to be written a second time.
    let urls = match &fx.server {
        crate::Server::Node(server) => vec![server.url()],
        crate::Server::Cluster(cluster) => cluster
            .addrs()
            .iter()
            .map(|a| format!("redis://{a}"))
            .collect(),
    };
    for url in urls {
        let mut c = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(400)
            .arg("ALL")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let dropped = tokio::time::timeout(std::time::Duration::from_millis(100), flusher.tick()).await;
    assert!(dropped.is_err(), "the write waited");
    flusher.finish().await;
    assert_eq!(sessions.pending_views(), 0);
    let seven: f64 = fx
        .raw()
        .await
        .zscore(fx.keys.item_views(), "7")
        .await
        .unwrap();
    assert_eq!(seven, -3.0, "each view once");
}
}

#[tokio::test]
async fn prefixed_keys_stay_in_their_namespace() {
    let (server, conn) = redis().await;
    let sessions = Sessions::new(conn, shop_cache::keys::Keys::with_prefix("s1:"));
    let t = SessionToken::generate();
    sessions
        .touch(
            &t,
            Touch::request()
                .as_user(UserId::new(1).unwrap())
                .view(item(2)),
        )
        .await
        .unwrap();
    sessions.flush_views().await.unwrap();
    let keys = server.all_keys().await;
    assert_eq!(
        keys.len(),
        7,
        "recent, login, logins, viewed:<token>, viewed:, view-writer:<process>, viewers:<item>:<window>"
    );
    assert!(keys.iter().all(|k| k.starts_with("s1:")), "{keys:?}");
}
