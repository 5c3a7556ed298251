//! A deterministic demo catalogue: the same `--seed` gives the same items everywhere.
//!
//! Rows are inserted in batches of multi-row `INSERT ... ON CONFLICT DO NOTHING`, one
//! transaction per batch, so seeding is fast, can be interrupted and resumed, and
//! re-running it on a seeded database changes nothing.

use crate::{Db, DbError};

/// The default catalogue size: the 100,000 items the shop is sized for.
pub const DEFAULT_ITEMS: u64 = 100_000;
/// The default seed.
pub const DEFAULT_SEED: u64 = 42;
/// The demo accounts and their passwords (printed by `shop seed` and the README).
pub const DEMO_USERS: [(&str, &str); 3] = [
    ("alice", "alice-password"),
    ("bob", "bob-password"),
    ("carol", "carol-password"),
];
/// Rows per INSERT: 5 parameters each, far below both databases' parameter limits.
const BATCH: u64 = 500;

/// What a seed run inserted (zero on a seeded database).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Items inserted (each with its inventory row).
    pub items: u64,
}

/// The adjectives of the demo titles (a load generator's search words too).
pub const ADJECTIVES: [&str; 16] = [
    "Compact", "Deluxe", "Classic", "Wireless", "Rugged", "Slim", "Smart", "Vintage", "Eco", "Pro",
    "Ultra", "Cozy", "Modular", "Portable", "Silent", "Bright",
];
/// The nouns of the demo titles.
pub const NOUNS: [&str; 16] = [
    "Kettle",
    "Backpack",
    "Lamp",
    "Headphones",
    "Blender",
    "Jacket",
    "Desk",
    "Camera",
    "Drill",
    "Mug",
    "Speaker",
    "Tent",
    "Keyboard",
    "Bottle",
    "Chair",
    "Watch",
];
/// The demo catalogue's departments.
pub const CATEGORIES: [&str; 8] = [
    "kitchen",
    "outdoor",
    "audio",
    "office",
    "clothing",
    "tools",
    "home",
    "electronics",
];

/// SplitMix64: a tiny, well-mixed, reproducible generator for demo data.
fn mix(seed: u64, id: u64, salt: u64) -> u64 {
    let mut z =
        seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct SeedItem {
    id: i64,
    title: String,
    description: String,
    price_cents: i64,
    category: &'static str,
    stock: i64,
}

fn item(seed: u64, id: u64) -> SeedItem {
    let pick = |salt, n: usize| (mix(seed, id, salt) % n as u64) as usize;
    let adjective = ADJECTIVES[pick(1, ADJECTIVES.len())];
    let noun = NOUNS[pick(2, NOUNS.len())];
    let category = CATEGORIES[pick(3, CATEGORIES.len())];
    SeedItem {
        id: id as i64,
        title: format!("{adjective} {noun} {id}"),
        description: format!(
            "A {} {} from our {category} range. Item {id}.",
            adjective.to_lowercase(),
            noun.to_lowercase()
        ),
        price_cents: 199 + (mix(seed, id, 4) % 99_800) as i64,
        category,
        stock: (mix(seed, id, 5) % 500) as i64,
    }
}

impl Db {
    /// Fills the catalogue with items `1..=items`, calling `progress(items done)`
    /// after each batch. Existing rows are left as they are. The demo users are
    /// [`Db::add_demo_users`], asked for on their own: their passwords are public.
    pub async fn seed(
        &self,
        items: u64,
        seed: u64,
        progress: &dyn Fn(u64),
    ) -> Result<SeedReport, DbError> {
        let mut report = SeedReport::default();
        let mut start = 1;
        while start <= items {
            let end = (start + BATCH - 1).min(items);
            let batch: Vec<SeedItem> = (start..=end).map(|id| item(seed, id)).collect();
            report.items += self.insert_batch(&batch).await?;
            progress(end);
            start = end + 1;
        }
        if report.items > 0 {
            self.tidy_search_index().await?;
        }
        Ok(report)
    }

    /// Adds the demo users ([`DEMO_USERS`], whose passwords are published) that
    /// are missing; returns those it added (name, password). Only on request
    /// (`--demo-users`): a shop facing the internet must not have accounts
    /// anyone can log in to.
    pub async fn add_demo_users(&self) -> Result<Vec<(&'static str, &'static str)>, DbError> {
        let mut added = Vec::new();
        for (name, password) in DEMO_USERS {
            let exists = sqlx::query("SELECT 1 FROM users WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.read)
                .await?
                .is_some();
            if !exists && self.create_user(name, password).await?.is_some() {
                added.push((name, password));
            }
        }
        Ok(added)
    }

    async fn insert_batch(&self, batch: &[SeedItem]) -> Result<u64, DbError> {
        let values = |cols: usize| {
            (0..batch.len())
                .map(|r| {
                    let ps: Vec<String> =
                        (1..=cols).map(|c| format!("${}", r * cols + c)).collect();
                    format!("({})", ps.join(", "))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let items_sql = format!(
            "INSERT INTO items (id, title, description, price_cents, category) VALUES {} \
             ON CONFLICT (id) DO NOTHING",
            values(5)
        );
        let inventory_sql = format!(
            "INSERT INTO inventory (item_id, stock) VALUES {} ON CONFLICT (item_id) DO NOTHING",
            values(2)
        );
        let mut tx = self.begin_write().await?;
        let mut q = sqlx::query(&items_sql);
        for it in batch {
            q = q
                .bind(it.id)
                .bind(it.title.as_str())
                .bind(it.description.as_str())
                .bind(it.price_cents)
                .bind(it.category);
        }
        let inserted = q.execute(&mut *tx).await?.rows_affected();
        let mut q = sqlx::query(&inventory_sql);
        for it in batch {
            q = q.bind(it.id).bind(it.stock);
        }
        q.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(inserted)
    }
}
