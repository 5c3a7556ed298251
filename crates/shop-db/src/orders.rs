//! Checkout: a cart becomes an order, atomically and at most once per idempotency key.
//!
//! One transaction: the order row first (its `(user, idempotency key)` uniqueness
//! makes a repeated checkout return the first order), then per line a conditional
//! `UPDATE inventory SET stock = stock - q WHERE stock >= q`, so stock never goes
//! negative and a line that cannot be filled aborts the whole order. The lines'
//! items are read inside the transaction (in bounded `IN (...)` chunks, so a cart
//! of any size never exceeds a database's parameter limit): an order is charged
//! the prices the database holds when it commits, never a page's, and only when
//! they and the cart's lines are what the shopper was shown and confirmed (the
//! cart page's [`CartVersion`]); otherwise nothing is ordered and the answer says
//! what changed. A retired item aborts it, and so does an item whose flash sale
//! runs (its units are sold only through the sale until it ends).

use std::collections::HashMap;

use serde::Serialize;
use shop_domain::cart_version::{CartChange, CartVersion};
use shop_domain::{ItemId, UserId};
use sqlx::Row;

use crate::catalogue::{RowLock, read_items};
use crate::items::Item;
use crate::{Db, DbError};

/// The most orders [`Db::untaken_orders`] reads at once.
pub const UNTAKEN_PER_READ: usize = 100;

/// A cart order whose lines are still to leave its shopper's cart
/// ([`Db::untaken_orders`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untaken {
    /// The order.
    pub order_id: i64,
    /// Whose cart (the account's) the lines are to leave.
    pub user: UserId,
    /// When it was placed, unix seconds.
    pub created_at: i64,
    /// Its lines: item and quantity ordered.
    pub lines: Vec<(ItemId, u32)>,
}

/// The answer to a checkout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CheckoutOutcome {
    /// The order is placed (now, or by an earlier request with the same key).
    Placed {
        /// The order.
        order_id: i64,
        /// What it costs, in cents.
        total_cents: i64,
        /// True when this call placed it; false when an earlier request with the
        /// same key did (a replay: the caller must not act on the cart again).
        new: bool,
        /// The items this order took the last units of (their pages, which say
        /// "in stock", are to be purged). Empty for a replay.
        #[serde(skip)]
        sold_out: Vec<ItemId>,
    },
    /// No such item; nothing was ordered.
    UnknownItem {
        /// The item.
        item_id: ItemId,
    },
    /// The item is no longer sold (retired); nothing was ordered.
    Retired {
        /// The item.
        item_id: ItemId,
    },
    /// The item's flash sale runs or is coming: its units are sold only through
    /// the sale (at the sale's price, within its per-account limit) until it
    /// ends; nothing was ordered.
    OnSale {
        /// The item.
        item_id: ItemId,
        /// When the sale ends, unix seconds.
        sale_end: i64,
    },
    /// The cart or its prices are not what the shopper confirmed, or a line's
    /// quantity is more than is left; nothing was ordered. The shopper is shown
    /// the cart again (saying what changed) and confirms this version.
    Changed {
        /// The version of the cart now, to confirm.
        cart_version: String,
        /// What differs from what was confirmed, a line each.
        changes: Vec<CartChange>,
    },
    /// The cart was empty.
    Empty,
}

/// One past order, for the account page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderSummary {
    /// The order.
    pub id: i64,
    /// `cart` or `flash`.
    pub kind: String,
    /// Total in cents.
    pub total_cents: i64,
    /// Units in all.
    pub units: i64,
    /// Unix seconds.
    pub created_at: i64,
}

/// One past order with its lines, for its page (`/account/orders/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderDetail {
    /// The order.
    #[serde(flatten)]
    pub summary: OrderSummary,
    /// What it bought, by item id.
    pub lines: Vec<OrderLine>,
}

/// One line of a past order: what was charged for it then, whatever the item
/// costs or is called now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderLine {
    /// The item.
    pub item: ItemId,
    /// The item's title when it was bought (for a line bought before lines kept
    /// their titles, the item's title now).
    pub title: String,
    /// Units bought.
    pub quantity: i64,
    /// The price charged for each, in cents.
    pub price_cents: i64,
}

impl Db {
    /// Places an order for `lines` (item, quantity > 0) at the items' regular
    /// prices, if they are the lines and prices of `shown` (the version of the cart
    /// the shopper confirmed); a key used before answers its order, whatever the
    /// cart holds now.
    pub async fn checkout(
        &self,
        user: UserId,
        lines: &[(ItemId, u32)],
        shown: &CartVersion,
        key: &str,
        now: i64,
    ) -> Result<CheckoutOutcome, DbError> {
        if lines.is_empty() {
            // A retry of an order placed already finds the cart it emptied; a page
            // that showed lines since emptied (another tab ordered them) is told so.
            if let Some(earlier) = self.earlier_order(user, key).await? {
                return Ok(earlier);
            }
            if shown.lines().is_empty() {
                return Ok(CheckoutOutcome::Empty);
            }
            return Ok(CheckoutOutcome::Changed {
                cart_version: String::new(),
                changes: shown.changes_to(&CartVersion::default()),
            });
        }
        let mut tx = self.begin_write().await?;
        let order = sqlx::query(
            "INSERT INTO orders (user_id, idempotency_key, kind, total_cents, created_at, \
             cart_taken) VALUES ($1, $2, 'cart', 0, $3, 0) \
             ON CONFLICT (user_id, idempotency_key) DO NOTHING RETURNING id",
        )
        .bind(user.to_i64())
        .bind(key)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(order) = order else {
            tx.rollback().await?;
            let earlier = self.earlier_order(user, key).await?;
            return earlier.ok_or(DbError::Corrupt {
                what: "orders (a key's order gone)",
            });
        };
        let order_id: i64 = order.try_get("id")?;
        // The items as this transaction sees them: a price changed or an item
        // retired before the commit is what the order gets.
        let ids: Vec<ItemId> = lines.iter().map(|&(item, _)| item).collect();
        let items: HashMap<ItemId, Item> = read_items(&mut tx, &ids, RowLock::Share).await?;
        if let Some(&(item, _)) = lines.iter().find(|(item, _)| !items.contains_key(item)) {
            tx.rollback().await?;
            return Ok(CheckoutOutcome::UnknownItem { item_id: item });
        }
        let now_version = CartVersion::new(
            lines
                .iter()
                .map(|&(item, quantity)| items[&item].shown_line(quantity))
                .collect(),
        );
        if &now_version != shown {
            tx.rollback().await?;
            let mut changes = shown.changes_to(&now_version);
            self.add_shortages(&mut changes, lines, now).await;
            return Ok(CheckoutOutcome::Changed {
                changes,
                cart_version: now_version.to_string(),
            });
        }
        let mut total = 0i64;
        let mut sold_out = Vec::new();
        for &(item, quantity) in lines {
            let found = &items[&item];
            if found.retired {
                tx.rollback().await?;
                return Ok(CheckoutOutcome::Retired { item_id: item });
            }
            let price = found.price_cents;
            // Not while the item's flash sale runs or is coming: its units are
            // the sale's from its start command on. After a sale, with the units
            // kept back for after it (one statement: they are the item's again).
            let left: Option<i64> = sqlx::query(
                "UPDATE inventory SET stock = stock + held_stock - $1, held_stock = 0 \
                 WHERE item_id = $2 AND stock + held_stock >= $3 \
                 AND (sale_end IS NULL OR sale_end <= $4) RETURNING stock",
            )
            .bind(i64::from(quantity))
            .bind(item.to_i64())
            .bind(i64::from(quantity))
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| row.try_get("stock"))
            .transpose()?;
            if left == Some(0) {
                sold_out.push(item);
            }
            if left.is_none() {
                // On sale, or not enough left: the shopper is shown how many
                // are, and lowers the line (the cart's version is unchanged, so
                // nothing else is).
                let row = sqlx::query(&format!(
                    "SELECT {} AS stock, sale_end FROM inventory WHERE item_id = $2",
                    crate::inventory::units_at("$1")
                ))
                .bind(now)
                .bind(item.to_i64())
                .fetch_optional(&mut *tx)
                .await?;
                let (in_stock, end): (i64, Option<i64>) = match row {
                    Some(row) => (row.try_get("stock")?, row.try_get("sale_end")?),
                    None => (0, None),
                };
                tx.rollback().await?;
                if let Some(sale_end) = end
                    && now < sale_end
                {
                    return Ok(CheckoutOutcome::OnSale {
                        item_id: item,
                        sale_end,
                    });
                }
                // Every line short of stock, not this one alone: the shopper
                // lowers them all before one more try.
                let mut changes = vec![CartChange::out_of_stock(item, in_stock)];
                self.add_shortages(&mut changes, lines, now).await;
                return Ok(CheckoutOutcome::Changed {
                    cart_version: now_version.to_string(),
                    changes,
                });
            }
            sqlx::query(
                "INSERT INTO order_lines (order_id, item_id, quantity, price_cents, title) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(order_id)
            .bind(item.to_i64())
            .bind(i64::from(quantity))
            .bind(price)
            .bind(&found.title)
            .execute(&mut *tx)
            .await?;
            total += price * i64::from(quantity);
        }
        sqlx::query("UPDATE orders SET total_cents = $1 WHERE id = $2")
            .bind(total)
            .bind(order_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(CheckoutOutcome::Placed {
            order_id,
            total_cents: total,
            new: true,
            sold_out,
        })
    }

    /// Adds to a refused checkout's `changes` every line of `lines` that wants
    /// more than the item's units left (as a new entry, or on the line's entry
    /// already there): read after the refusal, to say what to lower, deciding
    /// nothing. An item whose sale runs or is coming is left out (its own
    /// answer says so at the next try). Best effort: a read that fails leaves
    /// the refusal as it was (logged), not an error in its place.
    async fn add_shortages(
        &self,
        changes: &mut Vec<CartChange>,
        lines: &[(ItemId, u32)],
        now: i64,
    ) {
        let ids: Vec<ItemId> = lines.iter().map(|&(item, _)| item).collect();
        let units = match self.availability(&ids, now).await {
            Ok(units) => units,
            Err(error) => {
                tracing::warn!(%error, "a refused checkout's other lines' stock could not be read");
                return;
            }
        };
        for &(item, quantity) in lines {
            // No inventory row: none left, as checkout counts it.
            let (in_stock, on_sale) = units
                .get(&item)
                .map_or((0, false), |a| (a.stock, a.on_sale(now)));
            if in_stock >= i64::from(quantity) || on_sale {
                continue;
            }
            match changes.iter_mut().find(|change| change.item == item) {
                Some(change) => {
                    change.out_of_stock = true;
                    change.in_stock = Some(in_stock);
                }
                None => changes.push(CartChange::out_of_stock(item, in_stock)),
            }
        }
        changes.sort_by_key(|change| change.item);
    }

    /// The order `user` placed with `key` before, as a replay's answer, if any.
    async fn earlier_order(
        &self,
        user: UserId,
        key: &str,
    ) -> Result<Option<CheckoutOutcome>, DbError> {
        let row = sqlx::query(
            "SELECT id, total_cents FROM orders \
             WHERE user_id = $1 AND idempotency_key = $2 AND kind = 'cart'",
        )
        .bind(user.to_i64())
        .bind(key)
        .fetch_optional(&self.read)
        .await?;
        row.map(|row| {
            Ok(CheckoutOutcome::Placed {
                order_id: row.try_get("id")?,
                total_cents: row.try_get("total_cents")?,
                new: false,
                sold_out: Vec::new(),
            })
        })
        .transpose()
    }

    /// The user's orders, newest first (at most `limit`).
    pub async fn orders_of(&self, user: UserId, limit: i64) -> Result<Vec<OrderSummary>, DbError> {
        let rows = sqlx::query(
            "SELECT o.id, o.kind, o.total_cents, o.created_at, \
             CAST(COALESCE(SUM(l.quantity), 0) AS BIGINT) AS units \
             FROM orders o LEFT JOIN order_lines l ON l.order_id = o.id \
             WHERE o.user_id = $1 GROUP BY o.id, o.kind, o.total_cents, o.created_at \
             ORDER BY o.id DESC LIMIT $2",
        )
        .bind(user.to_i64())
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(OrderSummary {
                    id: r.try_get("id")?,
                    kind: r.try_get("kind")?,
                    total_cents: r.try_get("total_cents")?,
                    units: r.try_get("units")?,
                    created_at: r.try_get("created_at")?,
                })
            })
            .collect()
    }

    /// Order `order_id` with its lines, if it is `user`'s (another user's order
    /// is `None`, as one that does not exist).
    pub async fn order_of(
        &self,
        user: UserId,
        order_id: i64,
    ) -> Result<Option<OrderDetail>, DbError> {
        let Some(order) = sqlx::query(
            "SELECT id, kind, total_cents, created_at FROM orders WHERE id = $1 AND user_id = $2",
        )
        .bind(order_id)
        .bind(user.to_i64())
        .fetch_optional(&self.read)
        .await?
        else {
            return Ok(None);
        };
        let lines = self.lines_of(order_id).await?;
        Ok(Some(OrderDetail {
            summary: OrderSummary {
                id: order.try_get("id")?,
                kind: order.try_get("kind")?,
                total_cents: order.try_get("total_cents")?,
                units: lines.iter().map(|l| l.quantity).sum(),
                created_at: order.try_get("created_at")?,
            },
            lines,
        }))
    }

    /// Cart orders whose lines are not recorded as taken out of their
    /// shopper's cart ([`Db::mark_cart_taken`]), with ids above `after`, at
    /// most [`UNTAKEN_PER_READ`] orders, in id order: `user`'s newest (the
    /// ones a take may have missed; a shop without workers marks none, and
    /// each shopper's older ones have been taken again many times), or
    /// anyone's oldest (the sweep reads on from the last). A new order is one
    /// until it is marked; an older one may be a take that failed.
    pub async fn untaken_orders(
        &self,
        user: Option<UserId>,
        after: i64,
    ) -> Result<Vec<Untaken>, DbError> {
        let (whose, first) = match user {
            Some(_) => ("AND user_id = $2 ", "DESC"),
            None => ("", "ASC"),
        };
        let sql = format!(
            "SELECT o.id, o.user_id, o.created_at, l.item_id, l.quantity FROM orders o \
             JOIN order_lines l ON l.order_id = o.id \
             WHERE o.id IN (SELECT id FROM orders WHERE cart_taken = 0 AND id > $1 {whose}\
             ORDER BY id {first} LIMIT {UNTAKEN_PER_READ}) ORDER BY o.id, l.item_id"
        );
        let mut query = sqlx::query(&sql).bind(after);
        if let Some(user) = user {
            query = query.bind(user.to_i64());
        }
        let mut orders: Vec<Untaken> = Vec::new();
        for row in query.fetch_all(&self.read).await? {
            let order_id: i64 = row.try_get("id")?;
            let quantity: i64 = row.try_get("quantity")?;
            let quantity = u32::try_from(quantity).map_err(|_| DbError::Corrupt {
                what: "order_lines.quantity",
            })?;
            let item = crate::items::item_id(&row, "item_id", "order_lines.item_id")?;
            match orders.last_mut() {
                Some(order) if order.order_id == order_id => order.lines.push((item, quantity)),
                _ => orders.push(Untaken {
                    order_id,
                    user: crate::users::user_id(row.try_get("user_id")?)?,
                    created_at: row.try_get("created_at")?,
                    lines: vec![(item, quantity)],
                }),
            }
        }
        Ok(orders)
    }

    /// Records that the lines of `order_ids` have left their carts.
    pub async fn mark_cart_taken(&self, order_ids: &[i64]) -> Result<(), DbError> {
        if order_ids.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for chunk in order_ids.chunks(crate::items::IN_LIST_CHUNK) {
            let sql = format!(
                "UPDATE orders SET cart_taken = 1 WHERE cart_taken = 0 AND id IN ({})",
                crate::items::placeholders(chunk.len())
            );
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await
    }

    /// The lines of an order: (item, quantity, price in cents).
    pub async fn order_lines(&self, order_id: i64) -> Result<Vec<(ItemId, i64, i64)>, DbError> {
        let lines = self.lines_of(order_id).await?;
        Ok(lines
            .into_iter()
            .map(|line| (line.item, line.quantity, line.price_cents))
            .collect())
    }

    /// The lines of order `order_id`, by item id.
    async fn lines_of(&self, order_id: i64) -> Result<Vec<OrderLine>, DbError> {
        let rows = sqlx::query(
            "SELECT l.item_id, COALESCE(l.title, i.title) AS title, l.quantity, l.price_cents \
             FROM order_lines l \
             JOIN items i ON i.id = l.item_id WHERE l.order_id = $1 ORDER BY l.item_id",
        )
        .bind(order_id)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(OrderLine {
                    item: crate::items::item_id(r, "item_id", "order_lines.item_id")?,
                    title: r.try_get("title")?,
                    quantity: r.try_get("quantity")?,
                    price_cents: r.try_get("price_cents")?,
                })
            })
            .collect()
    }
}
