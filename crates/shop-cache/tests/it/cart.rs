use redis::AsyncCommands;
use shop_cache::CacheError;
use shop_cache::cart::{CART_TAKES_KEPT_FOR, CartOf, Carts, LineChange, Merged};
use shop_cache::domain::{InvalidInput, ItemId, UserId};
use shop_cache::session::SessionToken;

use crate::both_layouts;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn lines(cart: Vec<(ItemId, shop_cache::cart::Quantity)>) -> Vec<(u64, u32)> {
    cart.into_iter().map(|(i, q)| (i.get(), q.get())).collect()
}

both_layouts! {
async fn an_accounts_cart_is_its_own_key_with_a_lifetime_and_takes_orders(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99)
        .with_account_ttl(std::time::Duration::from_secs(3_600));
    let alice = CartOf::Account(UserId::new(7).unwrap());
    carts.set(alice.clone(), item(1), 2).await.unwrap();
    carts.set(alice.clone(), item(4), 1).await.unwrap();
    assert_eq!(lines(carts.get(alice.clone()).await.unwrap()), vec![(1, 2), (4, 1)]);
    // One key, no session's: it outlives every session, for its lifetime.
    let key = fx.keys.user_cart(UserId::new(7).unwrap());
    assert_eq!(fx.all_keys().await, vec![key.clone()]);
    let mut raw = fx.raw().await;
    let ttl: i64 = raw.ttl(&key).await.unwrap();
    assert!((3_500..=3_600).contains(&ttl), "{ttl}");
    // Held, taken and removed as a session's cart is.
    let hold = carts.hold_for_checkout(alice.clone()).await.unwrap().unwrap();
    assert!(carts.hold_for_checkout(alice.clone()).await.unwrap().is_none());
    carts.release(hold).await.unwrap();
    assert_eq!(carts.take(alice.clone(), &[(item(1), 2), (item(4), 9)]).await.unwrap(), 1);
    assert_eq!(lines(carts.get(alice.clone()).await.unwrap()), vec![(4, 1)]);
    carts.set(alice.clone(), item(4), 0).await.unwrap();
    assert!(carts.is_empty(alice.clone()).await.unwrap());
    // An order's take, once per order: done again (its answer lost), it takes
    // nothing, not even the same line added again since; the record of it
    // lives beside the cart (the same slot on a cluster) and expires.
    let user = UserId::new(7).unwrap();
    carts.set(alice.clone(), item(2), 3).await.unwrap();
    carts.set(alice.clone(), item(5), 1).await.unwrap();
    let ordered = [(item(2), 3), (item(5), 2)];
    assert_eq!(carts.take_order(user, (41, 1_000), &ordered, 1_000).await.unwrap(), Some(1));
    assert_eq!(lines(carts.get(alice.clone()).await.unwrap()), vec![(5, 1)]);
    carts.set(alice.clone(), item(2), 3).await.unwrap();
    assert_eq!(carts.take_order(user, (41, 1_000), &ordered, 1_001).await.unwrap(), None);
    assert_eq!(lines(carts.get(alice.clone()).await.unwrap()), vec![(2, 3), (5, 1)]);
    // The same id placed at another time is another order (a database restored
    // from an older copy gives its ids again): its lines leave.
    assert_eq!(carts.take_order(user, (41, 1_500), &ordered, 1_500).await.unwrap(), Some(1));
    assert_eq!(lines(carts.get(alice.clone()).await.unwrap()), vec![(5, 1)]);
    assert_eq!(carts.take_order(user, (42, 1_002), &[(item(5), 1)], 1_002).await.unwrap(), Some(1));
    // A take an earlier release recorded by the id alone: the same order when
    // taken at or after it was placed (a minute allowed for clocks), another
    // order (an id given again) when placed later than that.
    let _: () = raw.zadd(fx.keys.user_cart_takes(user), 43, 2_000).await.unwrap();
    carts.set(alice.clone(), item(6), 2).await.unwrap();
    assert_eq!(carts.take_order(user, (43, 1_999), &[(item(6), 2)], 2_001).await.unwrap(), None);
    assert_eq!(carts.take_order(user, (43, 2_060), &[(item(6), 2)], 2_061).await.unwrap(), None);
    assert_eq!(lines(carts.get(alice.clone()).await.unwrap()), vec![(6, 2)]);
    assert_eq!(carts.take_order(user, (43, 2_500), &[(item(6), 2)], 2_501).await.unwrap(), Some(1));
    let takes = fx.keys.user_cart_takes(user);
    let ttl: i64 = raw.ttl(&takes).await.unwrap();
    assert!(ttl > 0 && ttl as u64 <= CART_TAKES_KEPT_FOR.as_secs(), "{ttl}");
}

async fn a_guests_cart_joins_the_accounts_once_within_the_caps(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 5).with_max_lines(3);
    let user = UserId::new(9).unwrap();
    let account = CartOf::Account(user);
    carts.set(account.clone(), item(1), 4).await.unwrap();
    carts.set(account.clone(), item(2), 1).await.unwrap();
    let token = SessionToken::generate();
    carts.set(&token, item(1), 3).await.unwrap(); // 4 + 3, capped at 5
    carts.set(&token, item(2), 2).await.unwrap(); // 1 + 2
    carts.set(&token, item(3), 1).await.unwrap(); // a third line: room for it
    // Merged: quantities added within the most of one item; a fourth line would
    // not fit the three the cart may hold.
    let read = carts.get(&token).await.unwrap();
    let merged = carts.merge_into_account(&token, user).await.unwrap();
    assert_eq!(merged, Merged { left_out: 0, cut: 2 }, "4 + 3 is 2 past the most, 5");
    assert_eq!(lines(carts.get(account.clone()).await.unwrap()), vec![(1, 5), (2, 3), (3, 1)]);
    assert!(carts.is_empty(&token).await.unwrap(), "the session's cart is gone");
    // A retry of the same merge (the same lines, as a retried login read them)
    // adds nothing.
    carts.merge_lines(&token, user, &read).await.unwrap();
    assert_eq!(lines(carts.get(account.clone()).await.unwrap()), vec![(1, 5), (2, 3), (3, 1)]);
    // Another session's cart: the line past the cap is left out, and said.
    let other = SessionToken::generate();
    carts.set(&other, item(6), 1).await.unwrap();
    carts.set(&other, item(2), 1).await.unwrap();
    let merged = carts.merge_into_account(&other, user).await.unwrap();
    assert_eq!(merged, Merged { left_out: 1, cut: 0 });
    assert_eq!(lines(carts.get(account.clone()).await.unwrap()), vec![(1, 5), (2, 4), (3, 1)]);
    // A line held above the most (the most lowered since) keeps what it held:
    // the guest's units are what is cut.
    let _: () = fx.raw().await.hset(fx.keys.user_cart(user), 3, 8).await.unwrap();
    let third = SessionToken::generate();
    carts.set(&third, item(3), 2).await.unwrap();
    let merged = carts.merge_into_account(&third, user).await.unwrap();
    assert_eq!(merged, Merged { left_out: 0, cut: 2 });
    assert_eq!(lines(carts.get(account).await.unwrap()), vec![(1, 5), (2, 4), (3, 8)]);
}

async fn no_merge_while_a_checkout_holds_the_accounts_cart_and_a_late_line_stays(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let user = UserId::new(4).unwrap();
    let account = CartOf::Account(user);
    carts.set(account.clone(), item(5), 2).await.unwrap();
    let token = SessionToken::generate();
    carts.set(&token, item(5), 1).await.unwrap();
    // A checkout of the account's 2 is under way: the merge waits (the order would
    // otherwise leave 3 behind, as if the 2 were not ordered).
    let hold = carts.hold_for_checkout(account.clone()).await.unwrap().unwrap();
    let merged = carts.merge_into_account(&token, user).await.unwrap();
    assert_eq!(merged, Merged::default());
    assert_eq!(lines(carts.get(account.clone()).await.unwrap()), vec![(5, 2)]);
    assert_eq!(lines(carts.get(&token).await.unwrap()), vec![(5, 1)], "it waits");
    assert_eq!(carts.take(account.clone(), &[(item(5), 2)]).await.unwrap(), 1);
    carts.release(hold).await.unwrap();
    // The next read merges it. A line read for the merge and changed before its
    // removal stays in the session's cart, for the next merge.
    let read = carts.get(&token).await.unwrap();
    carts.set(&token, item(5), 7).await.unwrap();
    carts.merge_lines(&token, user, &read).await.unwrap();
    assert_eq!(lines(carts.get(account.clone()).await.unwrap()), vec![(5, 1)]);
    assert_eq!(lines(carts.get(&token).await.unwrap()), vec![(5, 7)], "changed: kept");
    // Merged in its turn at the next read: other lines, another merge.
    carts.merge_into_account(&token, user).await.unwrap();
    assert_eq!(lines(carts.get(account).await.unwrap()), vec![(5, 8)]);
    assert!(carts.is_empty(&token).await.unwrap());
}

async fn migrate_moves_the_carts_of_logged_in_sessions_into_their_accounts(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let sessions = shop_cache::session::Sessions::new(fx.conn.clone(), fx.keys.clone());
    let user = UserId::new(3).unwrap();
    // Two sessions of one user, logged in before carts were the accounts' (each
    // with its own cart), and a guest's.
    let (a, b, guest) = (SessionToken::generate(), SessionToken::generate(), SessionToken::generate());
    for token in [&a, &b] {
        sessions
            .touch(token, shop_cache::session::Touch::request().as_user(user))
            .await
            .unwrap();
    }
    carts.set(&a, item(1), 1).await.unwrap();
    carts.set(&b, item(1), 2).await.unwrap();
    carts.set(&b, item(2), 1).await.unwrap();
    carts.set(&guest, item(9), 1).await.unwrap();
    assert_eq!(carts.move_logged_in_carts().await.unwrap(), 2);
    let account = CartOf::Account(user);
    assert_eq!(lines(carts.get(account.clone()).await.unwrap()), vec![(1, 3), (2, 1)]);
    assert!(carts.is_empty(&a).await.unwrap() && carts.is_empty(&b).await.unwrap());
    assert_eq!(lines(carts.get(&guest).await.unwrap()), vec![(9, 1)], "a guest's stays");
    // Run again: nothing more.
    assert_eq!(carts.move_logged_in_carts().await.unwrap(), 0);
    assert_eq!(lines(carts.get(account).await.unwrap()), vec![(1, 3), (2, 1)]);
}

async fn set_overwrites_and_zero_or_less_removes(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let t = SessionToken::generate();
    carts.set(&t, item(1), 3).await.unwrap();
    carts.set(&t, item(2), 1).await.unwrap();
    assert_eq!(lines(carts.get(&t).await.unwrap()), vec![(1, 3), (2, 1)]);

    carts.set(&t, item(1), 5).await.unwrap();
    assert_eq!(lines(carts.get(&t).await.unwrap()), vec![(1, 5), (2, 1)]);

    assert_eq!(carts.set(&t, item(1), 0).await.unwrap(), LineChange::Remove);
    carts.set(&t, item(2), -3).await.unwrap();
    assert!(carts.get(&t).await.unwrap().is_empty());
    // An emptied cart leaves no key behind, only the session it started (sessions
    // start lazily: a cart line from a visitor with none starts it), a guest again.
    let mut session = vec![
        fx.keys.recent_of(&t).to_owned(),
        fx.keys.guests_of(&t).to_owned(),
    ];
    session.sort();
    assert_eq!(fx.all_keys().await, session);

    // Stored as the book's hash: item id -> quantity.
    carts.set(&t, item(8), 2).await.unwrap();
    let raw: Vec<(String, String)> = fx.raw().await.hgetall(fx.keys.cart(&t)).await.unwrap();
    let mut expected = vec![
        fx.keys.cart(&t),
        fx.keys.recent_of(&t).to_owned(),
        fx.keys.anonymous_of(&t).to_owned(),
    ];
    // Out of guests: again (a cart is no guest; not logged in, an anonymous
    // shopper's), and the emptied zset is gone.
    expected.sort();
    assert_eq!(fx.all_keys().await, expected);
    assert_eq!(raw, vec![("8".to_owned(), "2".to_owned())]);
}

/// Adding joins the line's quantity (a new line when there is none), in a guest's
/// cart and in an account's; a sum past the maximum, a count below 1 and a new
/// line for a full cart are refused and write nothing.
async fn add_joins_the_lines_quantity_within_the_caps(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 5).with_max_lines(2);
    let t = SessionToken::generate();
    let account = CartOf::Account(UserId::new(7).unwrap());
    for cart in [CartOf::from(&t), account] {
        assert_eq!(carts.add(cart.clone(), item(1), 2).await.unwrap().get(), 2);
        assert_eq!(carts.add(cart.clone(), item(1), 2).await.unwrap().get(), 4);
        let err = carts.add(cart.clone(), item(1), 2).await.unwrap_err();
        assert!(
            matches!(err, CacheError::Invalid(InvalidInput::LineFull { has: 4, max: 5 })),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "your cart holds 4 of this item and a line holds at most 5: you can add 1 more"
        );
        for bad in [0, -1] {
            let err = carts.add(cart.clone(), item(1), bad).await.unwrap_err();
            assert!(matches!(err, CacheError::Invalid(InvalidInput::QuantityTooSmall)), "{err:?}");
        }
        assert!(carts.add(cart.clone(), item(1), 6).await.is_err(), "above the maximum alone");
        assert_eq!(carts.add(cart.clone(), item(1), 1).await.unwrap().get(), 5);
        let err = carts.add(cart.clone(), item(1), 1).await.unwrap_err();
        assert_eq!(err.to_string(), "your cart holds 5 of this item, the most a line holds (5)");
        carts.add(cart.clone(), item(2), 1).await.unwrap();
        let err = carts.add(cart.clone(), item(3), 1).await.unwrap_err();
        assert!(matches!(err, CacheError::Invalid(InvalidInput::CartFull { max: 2 })), "{err:?}");
        assert_eq!(lines(carts.get(cart).await.unwrap()), vec![(1, 5), (2, 1)]);
    }
}

async fn too_large_a_quantity_is_refused_and_writes_nothing(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let t = SessionToken::generate();
    for bad in [100, 1_000_000, i64::MAX] {
        let err = carts.set(&t, item(1), bad).await.unwrap_err();
        assert!(
            matches!(
                err,
                CacheError::Invalid(InvalidInput::QuantityTooLarge { max: 99 })
            ),
            "{err:?}"
        );
    }
    assert!(fx.all_keys().await.is_empty(), "no key written");

    // A refused change leaves an existing line as it was.
    carts.set(&t, item(1), 4).await.unwrap();
    carts.set(&t, item(1), 100).await.unwrap_err();
    assert_eq!(lines(carts.get(&t).await.unwrap()), vec![(1, 4)]);
}

async fn the_maximum_is_configurable(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 5);
    let t = SessionToken::generate();
    carts.set(&t, item(1), 5).await.unwrap();
    assert!(carts.set(&t, item(1), 6).await.is_err());
    assert_eq!(lines(carts.get(&t).await.unwrap()), vec![(1, 5)]);
}

async fn a_foreign_value_in_a_cart_is_reported_not_panicked_on(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let t = SessionToken::generate();
    let _: () = fx
        .raw()
        .await
        .hset(fx.keys.cart(&t), "1", "lots")
        .await
        .unwrap();
    let err = carts.get(&t).await.unwrap_err();
    assert!(
        matches!(err, CacheError::Corrupt { what: "cart" }),
        "{err:?}"
    );
}

async fn a_full_cart_refuses_new_lines_and_writes_nothing(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99).with_max_lines(3);
    let t = SessionToken::generate();
    for i in 1..=3 {
        carts.set(&t, item(i), 1).await.unwrap();
    }
    let err = carts.set(&t, item(4), 1).await.unwrap_err();
    assert!(
        matches!(err, CacheError::Invalid(InvalidInput::CartFull { max: 3 })),
        "{err:?}"
    );
    let before: Vec<(String, String)> = fx.raw().await.hgetall(fx.keys.cart(&t)).await.unwrap();
    assert_eq!(before.len(), 3);
    // Lines already there can still change, and removing one makes room.
    carts.set(&t, item(2), 5).await.unwrap();
    carts.set(&t, item(1), 0).await.unwrap();
    carts.set(&t, item(4), 1).await.unwrap();
    assert_eq!(
        lines(carts.get(&t).await.unwrap()),
        vec![(2, 5), (3, 1), (4, 1)]
    );
}

async fn an_order_takes_only_the_lines_it_ordered_as_they_were(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let t = SessionToken::generate();
    carts.set(&t, item(1), 2).await.unwrap();
    carts.set(&t, item(2), 1).await.unwrap();
    carts.set(&t, item(3), 1).await.unwrap();
    // Ordered: 1x2, 2x1, 3x1. Meanwhile (between the order's read of the cart and
    // this), item 2 went to 4 and item 5 came in.
    carts.set(&t, item(2), 4).await.unwrap();
    carts.set(&t, item(5), 1).await.unwrap();
    let ordered = [(item(1), 2), (item(2), 1), (item(3), 1)];
    assert_eq!(carts.take(&t, &ordered).await.unwrap(), 2);
    assert_eq!(lines(carts.get(&t).await.unwrap()), vec![(2, 4), (5, 1)]);
    // Taken again (a retry): nothing more goes.
    assert_eq!(carts.take(&t, &ordered).await.unwrap(), 0);
    assert_eq!(lines(carts.get(&t).await.unwrap()), vec![(2, 4), (5, 1)]);
    // Taking the rest empties the cart and leaves no key behind.
    assert_eq!(carts.take(&t, &[(item(2), 4), (item(5), 1)]).await.unwrap(), 2);
    assert!(carts.get(&t).await.unwrap().is_empty());
    let cart_key = fx.keys.cart(&t).to_owned();
    assert!(!fx.all_keys().await.contains(&cart_key));
}
}
