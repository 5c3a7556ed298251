//! `shop sale`: starting and stopping a flash sale.

use crate::config::{DatabaseSettings, EdgeSettings, RedisSettings, SaleCommand};
use crate::connect::{connect_configured_cache, connect_existing_db, connect_redis};
use shop_app::sale::{self, SaleSet};
use shop_cache::domain::ItemId;

/// Runs `shop sale`.
pub async fn run(command: SaleCommand) -> anyhow::Result<()> {
    match command {
        SaleCommand::Start {
            id,
            stock,
            price_cents,
            minutes,
            refresh,
            redis,
            database,
            edge,
        } => {
            let (db, parts) = connect(&redis, &database, &edge).await?;
            let start = shop_db::unix_now();
            let sale = shop_db::inventory::Sale {
                stock,
                price_cents,
                start,
                end: start + minutes * 60,
            };
            let set = sale::start(&parts.stores(&db), id, sale, refresh).await;
            parts.settle_edges().await;
            let said = started(id, set?)?;
            crate::say!(
                "item {id} is on sale: {stock} units at {price_cents} cents for {minutes} min"
            );
            crate::say!("{said}");
            Ok(())
        }
        SaleCommand::Stop {
            id,
            redis,
            database,
            edge,
        } => {
            let (db, parts) = connect(&redis, &database, &edge).await?;
            let stopped = sale::stop(&parts.stores(&db), id).await;
            parts.settle_edges().await;
            if !stopped? {
                anyhow::bail!(
                    "item {id} has no sale running or coming: none was ended (its pages were \
                     purged again)"
                );
            }
            let left = db.inventory_row(id).await?.map_or(0, |row| row.stock);
            crate::say!(
                "item {id}'s sale ended: buys are refused from now; the item has {left} units, \
                 those the sale did not sell and those kept back for after it \
                 (`shop items stock {id} --set N` counts it)"
            );
            Ok(())
        }
    }
}

/// The shop's database and the Redis parts a sale is set in (its pages' purges
/// reaching the edges named).
async fn connect(
    redis: &RedisSettings,
    database: &DatabaseSettings,
    edge: &EdgeSettings,
) -> anyhow::Result<(shop_db::Db, sale::SaleParts)> {
    let (conn, keys) = connect_redis(redis).await?;
    let db = connect_existing_db(database).await?;
    let cache = connect_configured_cache(redis).await?;
    Ok((
        db,
        sale::SaleParts::new(&conn, cache, &keys).with_edges(edge.purger()),
    ))
}

/// What a sale's start answered, said as the line that follows "on sale", or as
/// an error naming the item unless it started.
pub fn started(id: ItemId, set: SaleSet) -> anyhow::Result<String> {
    match set {
        SaleSet::Started { stock_before, held } => Ok(format!(
            "a new sale: the item had {stock_before} units; the sale's are taken from them, and \
             {held} are kept back until the sale ends; every account may buy up to the limit"
        )),
        SaleSet::Changed { stock_before, held } => Ok(format!(
            "the item's sale that had not ended has these terms now ({stock_before} units were left \
             in it; {held} are kept back until it ends): what each account bought in it still \
             counts toward the limit, and a buy's answer stays"
        )),
        SaleSet::NoSuchItem => anyhow::bail!("there is no item {id}"),
        SaleSet::Retired => anyhow::bail!(
            "item {id} is no longer sold (retired): it cannot go on sale; \
             a line of `shop items import --sell-retired` naming it sells it again"
        ),
        SaleSet::AboveRegular { regular_cents } => anyhow::bail!(
            "item {id}'s regular price is {regular_cents} cents: a sale's price is at most \
             that; nothing was changed"
        ),
    }
}
