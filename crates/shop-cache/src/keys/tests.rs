//! Tests of the key layouts.

use super::*;

fn token() -> SessionToken {
    "AAAAAAAAAAAAAAAAAAAAAA".parse().unwrap()
}

#[test]
fn default_layout_is_the_books() {
    let k = Keys::default();
    let t = token();
    let s = k.shard_of(&t);
    assert_eq!(k.shards().len(), 1);
    assert_eq!(k.login_in(s), "login:");
    assert_eq!(k.recent_in(s), "recent:");
    assert_eq!(k.ended_in(s), "ended:");
    assert_eq!(k.guests_in(s), "guests:");
    assert_eq!(k.anonymous_in(s), "anonymous:");
    assert_eq!(k.logins_in(s), "logins:");
    assert_eq!(
        k.user_sessions(crate::domain::UserId::new(5).unwrap()),
        "user-sessions:5"
    );
    assert_eq!(
        k.password_epoch(crate::domain::UserId::new(5).unwrap()),
        "password-epoch:5"
    );
    assert_eq!(k.viewed_by(&t), "viewed:AAAAAAAAAAAAAAAAAAAAAA");
    assert_eq!(k.cart(&t), "cart:AAAAAAAAAAAAAAAAAAAAAA");
    assert_eq!(k.item_views(), "viewed:");
    assert_eq!(k.views_rescaled(), "rescaled:");
    assert_eq!(k.ranking_writer("w1"), "view-writer:w1");
    let i = ItemId::new(3).unwrap();
    assert_eq!(k.viewers(i, 2958), "viewers:3:2958");
    assert_eq!(k.buyers(i, 2958), "buyers:3:2958");
    assert_eq!(k.login_once("x"), k.login_once("x"));
    assert_ne!(k.login_once("x"), k.login_once("y"));
    assert!(k.login_once("x").starts_with("login-once:"));
    assert!(!k.login_attempts("name", "alice").contains("alice"));
    assert_eq!(k.also_bought(i), "also:3");
    assert_eq!(k.bought(), "bought:");
    assert_eq!(k.orders(), "orders:");
    assert_eq!(k.schedule(), "schedule:");
    assert_eq!(k.delay(), "delay:");
    assert_eq!(k.inventory(ItemId::new(7).unwrap()), "inv:7");
}

fn every_key(k: &Keys, t: &SessionToken) -> Vec<String> {
    let i = ItemId::new(1).unwrap();
    vec![
        k.login_of(t).to_owned(),
        k.recent_of(t).to_owned(),
        k.ended_of(t).to_owned(),
        k.guests_of(t).to_owned(),
        k.anonymous_of(t).to_owned(),
        k.logins_of(t).to_owned(),
        k.viewed_by(t),
        k.cart(t),
        k.login_once("k"),
        k.item_views().to_owned(),
        k.named("x"),
        k.slotted("n:", "t", "i1"),
        k.views_rescaled().to_owned(),
        k.ranking_writer("w1"),
        k.viewers(i, 1),
        k.buyers(i, 1),
        k.bought().to_owned(),
        k.orders().to_owned(),
        k.login_attempts("ip", "127.0.0.1"),
        k.login_name_limit("alice").0,
        k.login_name_limit("alice").1,
        k.device_key(),
        k.login_device_failures("alice", "1.ab"),
        k.user_sessions(crate::domain::UserId::new(5).unwrap()),
        k.password_epoch(crate::domain::UserId::new(5).unwrap()),
        k.also_bought(i),
        k.schedule().to_owned(),
        k.delay().to_owned(),
        k.inventory(i),
        k.sale(i),
        k.sale_buyers(i),
        k.sale_answers(i),
        k.sale_pending(i),
        k.sale_held(i),
        k.sales(),
    ]
}

#[test]
fn prefix_applies_to_every_key_in_both_layouts() {
    for k in [Keys::with_prefix("s1:"), Keys::cluster("s1:")] {
        for key in every_key(&k, &token()) {
            assert!(key.starts_with("s1:"), "{key}");
        }
    }
}

/// The hash tag Redis Cluster hashes (the whole key when there is none).
fn tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[test]
fn what_a_script_touches_together_shares_a_slot_in_the_cluster_layout() {
    let k = Keys::cluster("");
    let i = ItemId::new(42).unwrap();
    for _ in 0..50 {
        let t = SessionToken::generate();
        let session = tag(k.recent_of(&t));
        // touch, logout, cleaner: the index and the session's own keys.
        for key in [
            k.login_of(&t).to_owned(),
            k.ended_of(&t).to_owned(),
            k.guests_of(&t).to_owned(),
            k.anonymous_of(&t).to_owned(),
            k.logins_of(&t).to_owned(),
            k.viewed_by(&t),
            k.cart(&t),
        ] {
            assert_eq!(tag(&key), session, "{key}");
        }
        // login: the new token is beside the old one.
        let new = k.fresh_token_beside(&t);
        assert_ne!(new, t);
        assert_eq!(tag(&k.viewed_by(&new)), session);
        assert_eq!(tag(&k.cart(&new)), session);
    }
    // rescale: the ranking and its marker.
    assert_eq!(tag(k.views_rescaled()), tag(k.item_views()));
    // a view flush: the ranking and its writer's last call.
    assert_eq!(tag(&k.ranking_writer("w1")), tag(k.item_views()));
    assert_eq!(tag(k.unranked()), tag(k.item_views()));
    // record_order: the popularity beside the number of orders.
    assert_eq!(tag(k.bought()), tag(k.orders()));
    // record_order, per item.
    for key in [k.buyers(i, 7), k.viewers(i, 7)] {
        assert_eq!(tag(&key), tag(&k.also_bought(i)));
    }
    // the row cache.
    assert_eq!(tag(k.schedule()), tag(k.delay()));
    assert_eq!(tag(&k.inventory(i)), tag(k.delay()));
    // a flash sale's reservation and settlement scripts.
    for key in [
        k.sale_buyers(i),
        k.sale_answers(i),
        k.sale_pending(i),
        k.sale_held(i),
    ] {
        assert_eq!(tag(&key), tag(&k.sale(i)), "{key}");
    }
    assert_ne!(tag(&k.sale(i)), tag(&k.sale(ItemId::new(43).unwrap())));
    // another feature's keys of one group and id share a slot; ids spread.
    assert_eq!(
        tag(&k.slotted("a:", "t", "i42")),
        tag(&k.slotted("b:", "t", "i42"))
    );
    assert_ne!(
        tag(&k.slotted("a:", "t", "i42")),
        tag(&k.slotted("a:", "t", "i43"))
    );
    // a name's login limit: its counter and its slow-down slot; names spread.
    let (count, slow) = k.login_name_limit("alice");
    assert_eq!(tag(&count), tag(&slow));
    assert_eq!(tag(&count), tag(&k.login_device_failures("alice", "1.ab")));
    assert_ne!(tag(&count), tag(&k.login_name_limit("bob").0));
    // Different items and sessions spread.
    assert_ne!(
        tag(&k.also_bought(i)),
        tag(&k.also_bought(ItemId::new(43).unwrap()))
    );
}

#[test]
fn sessions_spread_over_every_shard() {
    let k = Keys::cluster("");
    let mut seen = vec![0u32; k.shards().len()];
    for _ in 0..64 * 200 {
        seen[k.shard_of(&SessionToken::generate()).get() as usize] += 1;
    }
    // 200 expected per shard; a shard below 100 or above 300 means a bad hash.
    assert!(seen.iter().all(|&n| (100..300).contains(&n)), "{seen:?}");
}

#[test]
fn shard_counts_are_checked() {
    assert_eq!(
        Keys::new("", Layout::Cluster { shards: 0 }),
        Err(BadShards(0))
    );
    assert!(
        Keys::new(
            "",
            Layout::Cluster {
                shards: MAX_SHARDS + 1
            }
        )
        .is_err()
    );
    assert_eq!(
        Keys::new("", Layout::Cluster { shards: 1 })
            .unwrap()
            .shards()
            .len(),
        1
    );
}
