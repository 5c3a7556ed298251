//! `shop items`: changing the catalogue. Each subcommand is one workflow of
//! [`shop_app::catalogue`]; this module reads the flags and the file, and prints.

use std::io::BufRead;
use std::time::Instant;

use anyhow::Context;
use shop_app::catalogue::{Applied, Catalogue, CatalogueError};
use shop_cache::analytics::Analytics;
use shop_cache::domain::catalogue::{ItemEdit, ItemFields};
use shop_cache::flash_sale::FlashSales;
use shop_cache::row_cache::RowCache;
use shop_db::catalogue::RetiredInImport;
use shop_db::inventory::StockChange;
use shop_page_cache::{DEFAULT_TTL, PageStore};

use crate::config::{ItemsArgs, ItemsCommand};
use crate::connect::{connect_configured_cache, connect_db, connect_redis};

/// Lines of an import written (and purged) per transaction: small enough that
/// checkouts wait at most a moment for SQLite's one writer between chunks.
const IMPORT_CHUNK: usize = 500;

/// Runs `shop items`.
pub async fn run(args: ItemsArgs) -> anyhow::Result<()> {
    // Checked before connecting: bad input is an error that changes nothing.
    let lines = match &args.command {
        ItemsCommand::Import { file, .. } => Some(read_import(file)?),
        _ => None,
    };
    let (conn, keys) = connect_redis(&args.redis).await?;
    // Adding items may start a new shop's database; changing one needs the
    // shop's own (a new, empty one would only say there is no such item).
    let db = match &args.command {
        ItemsCommand::Add { .. } | ItemsCommand::Import { .. } => {
            connect_db(&args.database).await?
        }
        _ => crate::connect::connect_existing_db(&args.database).await?,
    };
    let pages = PageStore::in_cache_or_state(
        connect_configured_cache(&args.redis).await?,
        conn.clone(),
        &keys,
        DEFAULT_TTL,
    )
    .with_edges(args.edge.purger());
    let rows = RowCache::new(conn.clone(), keys.clone());
    let ranking = Analytics::new(conn.clone(), keys.clone());
    let sales = FlashSales::new(conn, keys);
    let catalogue = Catalogue {
        db: &db,
        pages: &pages,
        rows: &rows,
        ranking: &ranking,
        sales: &sales,
    };
    let done: anyhow::Result<()> = async {
    match args.command {
        ItemsCommand::Add {
            title,
            description,
            price_cents,
            category,
            id,
            stock,
        } => {
            let fields = ItemFields::new(&title, &description, price_cents, &category)?;
            let item = catalogue.add(id, &fields, stock).await.map_err(explain)?;
            crate::say!("{}", item.id);
        }
        ItemsCommand::Update {
            id,
            title,
            description,
            price_cents,
            category,
            if_version,
        } => {
            let edit = ItemEdit::new(
                title.as_deref(),
                description.as_deref(),
                price_cents,
                category.as_deref(),
            )?;
            if edit.is_empty() {
                anyhow::bail!(
                    "nothing to change: give --title, --description, --price-cents or --category"
                );
            }
            let applied = catalogue
                .update(id, &edit, if_version)
                .await
                .map_err(explain)?;
            let version = db.item(id).await?.map_or(0, |item| item.version);
            say(&format!("item {id}"), version, &applied);
        }
        ItemsCommand::Stock { id, add, set } => {
            let change = match (add, set) {
                (Some(units), _) => StockChange::Add(units),
                (None, Some(units)) => StockChange::Set(units),
                (None, None) => anyhow::bail!("give --add N or --set N"),
            };
            let (before, after) = catalogue.stock(id, change).await.map_err(explain)?;
            crate::say!("item {id}: {before} units before, {after} now");
        }
        ItemsCommand::Remove { id } => {
            let applied = catalogue.retire(id).await.map_err(explain)?;
            if applied.changed.is_empty() {
                crate::say!("item {id} was already retired");
            } else {
                crate::say!(
                    "item {id} retired ({} cached pages purged)",
                    applied.pages_purged
                );
            }
        }
        ItemsCommand::Import {
            quiet,
            sell_retired,
            ..
        } => {
            let retired = match sell_retired {
                true => RetiredInImport::SellAgain,
                false => RetiredInImport::Keep,
            };
            let lines = lines.expect("read above");
            let bar = if quiet {
                indicatif::ProgressBar::hidden()
            } else {
                indicatif::ProgressBar::new(lines.len() as u64).with_style(
                    indicatif::ProgressStyle::with_template(
                        "importing {bar:40} {pos}/{len} items ({eta} left)",
                    )
                    .expect("a valid progress template"),
                )
            };
            let started = Instant::now();
            let mut total = Applied::default();
            // Ctrl-C or SIGTERM stops the import between chunks: the chunk
            // being written is written and purged whole, and the import says
            // how far it got (killed at once, a chunk's purge could be lost).
            let mut stop = Box::pin(crate::shutdown::listen());
            for chunk in lines.chunks(IMPORT_CHUNK) {
                if futures::FutureExt::now_or_never(&mut stop).is_some() {
                    bar.abandon();
                    let (done, written) = (total.added.len() + total.changed.len(), total.lines());
                    anyhow::bail!(
                        "the import was stopped: the first {written} lines are written ({done} \
                         added or changed, their pages purged); running it again finishes it"
                    );
                }
                let chunk: Vec<_> = chunk
                    .iter()
                    .map(|l| (l.id, l.fields.clone(), l.stock))
                    .collect();
                match catalogue.import_chunk(&chunk, retired).await {
                    Ok(applied) => total.merge(applied),
                    Err(error) => {
                        bar.abandon();
                        let (done, written) =
                            (total.added.len() + total.changed.len(), total.lines());
                        if matches!(error, CatalogueError::NotPurged { .. }) {
                            // This chunk is written too: only its purge is left.
                            return Err(explain(error)).with_context(|| {
                                format!(
                                    "the import stopped after {} lines were written",
                                    written + chunk.len()
                                )
                            });
                        }
                        return Err(explain(error)).with_context(|| {
                            format!(
                                "the import stopped: the first {written} lines are written \
                                 ({done} added or changed); running it again finishes it"
                            )
                        });
                    }
                }
                bar.inc(chunk.len() as u64);
            }
            bar.finish_and_clear();
            crate::say!(
                "imported {} lines in {:.1?}: {} added, {} changed, {} unchanged, {} left retired; \
                 {} cached pages purged",
                lines.len(),
                started.elapsed(),
                total.added.len(),
                total.changed.len(),
                total.unchanged,
                total.kept_retired.len(),
                total.pages_purged
            );
            if !total.kept_retired.is_empty() {
                const NAMED: usize = 10;
                let kept = &total.kept_retired;
                let mut ids: Vec<String> = kept.iter().take(NAMED).map(|id| id.to_string()).collect();
                if kept.len() > NAMED {
                    ids.push(format!("and {} more", kept.len() - NAMED));
                }
                let lines = match kept.len() {
                    1 => "1 line names a retired item".to_owned(),
                    n => format!("{n} lines name retired items"),
                };
                eprintln!(
                    "warning: {lines}, left retired and unchanged: {}; `--sell-retired` \
                     sells them again",
                    ids.join(", ")
                );
            }
            // An import is not refused for it (its lines were checked before a
            // write), but a sale priced above its item sells nothing: say so.
            for (id, sale, regular) in db.sales_above_regular(shop_db::unix_now()).await? {
                eprintln!(
                    "warning: item {id}'s flash sale is priced at {sale} cents, above its regular \
                     price of {regular} cents: it sells nothing until it is started again at a \
                     price no higher (`shop sale start`) or the regular price is raised"
                );
            }
        }
        ItemsCommand::Purge { ids } => {
            let n = catalogue.purge(&ids).await.map_err(explain)?;
            crate::say!("{n} cached pages purged");
        }
    }
    Ok(())
    }
    .await;
    // Before it exits: the edges' purges sent again in the background.
    pages.settle_edges().await;
    done
}

/// Reads and checks the whole import file before anything is written.
fn read_import(file: &std::path::Path) -> anyhow::Result<Vec<shop_app::import::ImportLine>> {
    let input: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f =
            std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    shop_app::import::parse(input).with_context(|| {
        format!(
            "{} is not a valid import (nothing was written)",
            file.display()
        )
    })
}

/// What an update did, in a line, with the item's version now.
fn say(what: &str, version: i64, applied: &Applied) {
    if applied.changed.is_empty() {
        crate::say!("{what} unchanged at version {version} (it already had these values)");
    } else {
        crate::say!(
            "{what} updated to version {version} ({} cached pages purged)",
            applied.pages_purged
        );
    }
}

/// A workflow's error as the command's, with what to do about a failed purge.
fn explain(error: CatalogueError) -> anyhow::Error {
    match &error {
        CatalogueError::NotPurged { items, .. } => {
            let ids: Vec<String> = items.iter().map(ToString::to_string).collect();
            anyhow::Error::new(error).context(format!(
                "the change is saved, but old pages may be served until they are purged: \
                 once Redis and the edge caches answer, run `shop items purge {}`",
                ids.join(" ")
            ))
        }
        CatalogueError::Stale { current } => {
            anyhow::anyhow!(
                "{error}; it is now: title {:?}, description {:?}, price_cents {}, category {:?}",
                current.title,
                current.description,
                current.price_cents,
                current.category
            )
        }
        _ => anyhow::Error::new(error),
    }
}
