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
            // A row the refresher would drop (no such item) or cache as if still
            // sold is refused, not said to be scheduled.
            if delay > 0.0 {
                match crate::connect::connect_existing_db(&args.database)
                    .await?
                    .item(id)
                    .await?
                {
                    None => anyhow::bail!("there is no item {id}: nothing scheduled"),
                    Some(item) if item.retired => anyhow::bail!(
                        "item {id} is no longer sold (retired): its row is not cached; \
                         nothing scheduled"
                    ),
                    Some(_) => {}
                }
            }
            rows.schedule(id, delay).await?;
            if delay > 0.0 {
                crate::say!("row {id} scheduled every {delay} s");
            } else {
                // A delay of 0 or less stops caching it (as the book's did).
                crate::say!(
                    "row {id} unscheduled (a delay of 0 or less stops caching it; its copy \
                     goes at the refresher's next step)"
                );
            }
        }
        RowsCommand::Unschedule { id } => {
            rows.unschedule(id).await?;
            crate::say!("row {id} unscheduled");
        }
        RowsCommand::List => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            crate::say!("{:>12} {:>10} {:>12}", "row", "delay_s", "due_in_s");
            for r in rows.list().await? {
                let delay = r.delay.map_or("-".to_owned(), |d| d.to_string());
                crate::say!("{:>12} {:>10} {:>12.1}", r.row, delay, r.next_at - now);
            }
        }
    }
    Ok(())
}
