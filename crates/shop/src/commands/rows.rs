//! `shop rows`: the database row cache's schedule.

use shop_cache::row_cache::RowCache;

use crate::config::{RowsArgs, RowsCommand};
use crate::connect::connect_redis;

/// Runs `shop rows`.
pub async fn run(args: RowsArgs) -> anyhow::Result<()> {
    let (conn, keys) = connect_redis(&args.redis).await?;
    let rows = RowCache::new(conn, keys);
    match args.command {
        RowsCommand::Schedule { id, delay } => {
            rows.schedule(id, delay).await?;
            println!("row {id} scheduled every {delay} s");
        }
        RowsCommand::Unschedule { id } => {
            rows.unschedule(id).await?;
            println!("row {id} unscheduled");
        }
        RowsCommand::List => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            println!("{:>12} {:>10} {:>12}", "row", "delay_s", "due_in_s");
            for r in rows.list().await? {
                let delay = r.delay.map_or("-".to_owned(), |d| d.to_string());
                println!("{:>12} {:>10} {:>12.1}", r.row, delay, r.next_at - now);
            }
        }
    }
    Ok(())
}
