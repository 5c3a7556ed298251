//! Orders whose lines are still to leave their shopper's cart: a checkout's
//! order is one until the sweep marks it; a shopper's newest are read first
//! (the ones a take may have missed), anyone's oldest by the sweep.

use shop_db::orders::{CheckoutOutcome, UNTAKEN_PER_READ};
use shop_domain::{ItemId, UserId};

use crate::databases;

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

#[tokio::test]
async fn a_shoppers_newest_untaken_orders_are_read_first_and_the_sweeps_oldest() {
    for (test_db, db) in databases().await {
        let kind = test_db.kind();
        db.seed(5, 3, &|_| {}).await.unwrap();
        sqlx::query("UPDATE inventory SET stock = 1000")
            .execute(db.pool())
            .await
            .unwrap();
        let user = db.create_user("ivy", "a long enough password").await;
        let user: UserId = user.unwrap().unwrap();
        let lines = [(item(2), 1)];
        let shown = db.cart_version(&lines).await.unwrap();
        let placed = UNTAKEN_PER_READ as i64 + 5;
        let mut ids = Vec::new();
        for n in 0..placed {
            let key = format!("k{n}");
            match db.checkout(user, &lines, &shown, &key, 1).await.unwrap() {
                CheckoutOutcome::Placed { order_id, .. } => ids.push(order_id),
                other => panic!("{kind}: {other:?}"),
            }
        }
        let read = |user: Option<UserId>, after: i64| {
            let db = db.clone();
            async move {
                let untaken = db.untaken_orders(user, after).await.unwrap();
                untaken
                    .iter()
                    .map(|order| order.order_id)
                    .collect::<Vec<_>>()
            }
        };
        let per_read = UNTAKEN_PER_READ;
        assert_eq!(read(Some(user), 0).await, ids[5..], "{kind}: the newest");
        assert_eq!(read(None, 0).await, ids[..per_read], "{kind}: the oldest");
        assert_eq!(
            read(None, ids[per_read - 1]).await,
            ids[per_read..],
            "{kind}"
        );
        let order = db.untaken_orders(Some(user), 0).await.unwrap().remove(0);
        assert_eq!((order.user, order.lines), (user, lines.to_vec()), "{kind}");

        db.mark_cart_taken(&ids[..per_read]).await.unwrap();
        assert_eq!(read(None, 0).await, ids[per_read..], "{kind}: marked");
        db.mark_cart_taken(&ids).await.unwrap();
        assert!(read(Some(user), 0).await.is_empty(), "{kind}");
    }
}
