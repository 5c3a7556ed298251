//! `shop seed`: the demo catalogue, with a progress bar.

use std::time::Instant;

use anyhow::Context;
use shop_db::Db;

use crate::config::SeedArgs;
use crate::connect::connect_db;

/// Runs `shop seed`.
pub async fn run(args: SeedArgs) -> anyhow::Result<()> {
    let db = connect_db(&args.database).await?;
    with_progress(&db, args.items, args.seed).await
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
    println!(
        "seeded {} new items and {} demo users in {:.1?} (catalogue: {} items)",
        report.items,
        report.users,
        started.elapsed(),
        db.item_count().await?
    );
    if report.users > 0 {
        let users: Vec<String> = shop_db::seed::DEMO_USERS
            .iter()
            .map(|(name, password)| format!("{name} / {password}"))
            .collect();
        println!("demo logins: {}", users.join(", "));
    }
    Ok(())
}
