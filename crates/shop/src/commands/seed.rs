//! `shop seed`: the demo catalogue, with a progress bar.

use std::time::Instant;

use anyhow::Context;
use shop_db::Db;

use crate::config::SeedArgs;
use crate::connect::connect_db;

/// Runs `shop seed`.
pub async fn run(args: SeedArgs) -> anyhow::Result<()> {
    let db = connect_db(&args.database).await?;
    with_progress(&db, args.items, args.seed).await?;
    if args.demo_users {
        demo_users(&db).await?;
    }
    Ok(())
}

/// Adds the demo accounts that are missing and prints the logins of those it
/// added (one there already may have had its password changed since).
pub async fn demo_users(db: &Db) -> anyhow::Result<()> {
    let added = db.add_demo_users().await.context("adding the demo users")?;
    if added.is_empty() {
        crate::say!("0 demo users added: they are there already, with their passwords as set");
        return Ok(());
    }
    let users: Vec<String> = added
        .iter()
        .map(|(name, password)| format!("{name} / {password}"))
        .collect();
    crate::say!(
        "{} demo users added; demo logins: {}",
        added.len(),
        users.join(", ")
    );
    Ok(())
}

/// Seeds `items` items with a progress bar, then says what was added.
pub async fn with_progress(db: &Db, items: u64, seed: u64) -> anyhow::Result<()> {
    let bar = indicatif::ProgressBar::new(items).with_style(
        indicatif::ProgressStyle::with_template("seeding {bar:40} {pos}/{len} items ({eta} left)")
            .expect("a valid progress template"),
    );
    let started = Instant::now();
    let report = db
        .seed(items, seed, &|done| bar.set_position(done))
        .await
        .context("seeding the catalogue")?;
    bar.finish_and_clear();
    crate::say!(
        "seeded {} new items in {:.1?} (catalogue: {} items)",
        report.items,
        started.elapsed(),
        db.item_count().await?
    );
    Ok(())
}
