//! `shop load`: driving a running shop (the mix, or a flash sale's burst).

use std::time::Duration;

use anyhow::Context;

use crate::config::{LoadArgs, OnlyArg};
use crate::flash_load;

/// Runs `shop load`.
pub async fn run(args: LoadArgs) -> anyhow::Result<()> {
    if args.scenario == crate::config::Scenario::Flash {
        return flash_load::run(&args).await;
    }
    let duration = match (args.duration, args.requests) {
        (Some(secs), _) if !(secs > 0.0 && secs.is_finite()) => {
            anyhow::bail!("--duration must be positive")
        }
        (Some(secs), _) => Some(Duration::from_secs_f64(secs)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let config = shop_load::LoadConfig {
        target: args.target,
        metrics: args.metrics,
        connections: args.connections as usize,
        duration,
        requests: args.requests,
        rate: args.rate,
        items: args.items,
        zipf_exponent: args.zipf,
        shoppers: args.shoppers as usize,
        mix: match args.only {
            Some(OnlyArg::Pageviews) => shop_load::Mix::page_views(),
            Some(OnlyArg::Views) => shop_load::Mix::views_only(),
            Some(OnlyArg::Browse) => shop_load::Mix::browse_only(),
            Some(OnlyArg::Search) => shop_load::Mix::search_only(),
            None => shop_load::Mix::default(),
        },
        categories: shop_db::seed::CATEGORIES.map(str::to_owned).to_vec(),
        search_words: shop_db::seed::NOUNS
            .iter()
            .chain(&shop_db::seed::ADJECTIVES)
            .chain(&shop_db::seed::CATEGORIES)
            .map(|w| w.to_lowercase())
            .collect(),
        seed: args.seed,
        progress: !args.quiet,
    };
    let report = shop_load::run(config).await?;
    print!("{}", report.render());
    if let Some(path) = &args.json {
        report
            .write_json(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        report
            .write_svg(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
