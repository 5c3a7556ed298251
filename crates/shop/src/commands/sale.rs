//! `shop sale`: starting a flash sale.

use crate::config::SaleCommand;
use crate::connect::{connect_db, connect_redis};
use shop_app::sale;

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
        } => {
            let (conn, keys) = connect_redis(&redis).await?;
            let db = connect_db(&database).await?;
            let start = shop_db::unix_now();
            let sale = shop_db::inventory::Sale {
                stock,
                price_cents,
                start,
                end: start + minutes * 60,
            };
            let cache = crate::connect::connect_configured_cache(&redis).await?;
            let parts = sale::SaleParts::new(&conn, cache, &keys);
            if !sale::start(&parts.stores(&db), id, sale, refresh).await? {
                anyhow::bail!("there is no item {id}");
            }
            println!(
                "item {id} is on sale: {stock} units at {price_cents} cents for {minutes} min"
            );
            Ok(())
        }
    }
}
