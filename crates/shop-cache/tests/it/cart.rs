use redis::AsyncCommands;
use shop_cache::CacheError;
use shop_cache::cart::{Carts, LineChange};
use shop_cache::domain::{InvalidInput, ItemId};
use shop_cache::session::SessionToken;

use crate::both_layouts;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

fn lines(cart: Vec<(ItemId, shop_cache::cart::Quantity)>) -> Vec<(u64, u32)> {
    cart.into_iter().map(|(i, q)| (i.get(), q.get())).collect()
}

both_layouts! {
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
