//! Full-text search over the catalogue's titles and descriptions, with each
//! database's own index (migration `0002`): SQLite's FTS5 (porter stemming, ranked
//! by bm25 with titles weighing ten times descriptions) and PostgreSQL's `tsvector`
//! with a GIN index (English stemming, ranked by `ts_rank` with titles weighted `A`
//! over descriptions `B`). Equal ranks are ordered by id, so pages are stable.
//!
//! What a visitor types is never handed to either query language. It is cut into
//! words (runs of letters and digits, in any script), lowercased, at most
//! [`MAX_WORDS`] of them, each at most [`MAX_WORD`] characters, and an item must
//! match every word. Quotes, operators, brackets and the like only separate words,
//! so no input is a syntax error, and none is an expensive query.

use crate::items::Item;
use crate::{Backend, Db, DbError};

/// Most words of a search that count; the rest are ignored.
pub const MAX_WORDS: usize = 8;
/// Longest word kept, in characters (longer words are cut).
pub const MAX_WORD: usize = 40;

/// The words of a search, ready for either database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchWords(Vec<String>);

impl SearchWords {
    /// The words of `text` (see the module docs); empty if it has none.
    pub fn from_text(text: &str) -> Self {
        let words = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| w.chars().take(MAX_WORD).collect::<String>().to_lowercase())
            .take(MAX_WORDS)
            .collect();
        Self(words)
    }

    /// True when there is nothing to search for.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The words, space-separated (what a search box shows back).
    pub fn joined(&self) -> String {
        self.0.join(" ")
    }

    /// An FTS5 query: each word a quoted string (so nothing in it is syntax),
    /// all of them required.
    fn fts5(&self) -> String {
        self.0
            .iter()
            .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Db {
    /// Folds a bulk load into the search index, as seeding does after inserting:
    /// FTS5's `optimize` merges the index's many small segments into one (15%
    /// off a search at 100,000 items), and PostgreSQL's `VACUUM ANALYZE` empties
    /// the GIN index's pending list, which every search otherwise scans in full
    /// (14 ms against 5 ms for a word matching 6,000 items, until autovacuum gets
    /// to it).
    pub async fn tidy_search_index(&self) -> Result<(), DbError> {
        match self.backend() {
            Backend::Sqlite => {
                let mut tx = self.begin_write().await?;
                sqlx::query("INSERT INTO items_search (items_search) VALUES ('optimize')")
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
            }
            // Maintenance that PostgreSQL runs only outside a transaction block; it
            // changes no data, and a statement on its own cannot leave one open.
            Backend::Postgres => {
                sqlx::query("VACUUM ANALYZE items")
                    .execute(&self.write)
                    .await?;
            }
        }
        Ok(())
    }

    /// Live items matching every word, best first, skipping `offset`, at most `limit`
    /// (SQLite's index holds live items only; PostgreSQL filters, on a partial index).
    pub async fn search(
        &self,
        words: &SearchWords,
        offset: u32,
        limit: u32,
    ) -> Result<Vec<Item>, DbError> {
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let (sql, text) = match self.backend() {
            Backend::Sqlite => (
                // Ranked and cut in the index first, then joined: joining every
                // match before the sort took 1.5-2x as long (10-18 ms against 6-10
                // ms for a word that matches 6,000-12,000 of 100,000 items).
                "SELECT i.id, i.title, i.description, i.price_cents, i.category, i.retired_at, i.version \
                 FROM ( \
                     SELECT rowid AS id, bm25(items_search, 10.0, 1.0) AS score \
                     FROM items_search WHERE items_search MATCH $1 \
                     ORDER BY score, rowid LIMIT $2 OFFSET $3 \
                 ) AS hit JOIN items AS i ON i.id = hit.id AND i.retired_at IS NULL \
                 ORDER BY hit.score, hit.id",
                words.fts5(),
            ),
            Backend::Postgres => (
                "SELECT id, title, description, price_cents, category, retired_at, version \
                 FROM items, plainto_tsquery('english', $1) AS q \
                 WHERE search @@ q AND retired_at IS NULL \
                 ORDER BY ts_rank(search, q) DESC, id \
                 LIMIT $2 OFFSET $3",
                words.joined(),
            ),
        };
        let rows = sqlx::query(sql)
            .bind(text)
            .bind(i64::from(limit))
            .bind(i64::from(offset))
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(Item::from_row).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_letters_and_digits_only() {
        let w = SearchWords::from_text(r#"  "Kettle" OR (lamp* -NEAR/2) AND col:x ^^ "#);
        assert_eq!(
            w.0,
            ["kettle", "or", "lamp", "near", "2", "and", "col", "x"]
        );
        assert_eq!(
            w.fts5(),
            r#""kettle" "or" "lamp" "near" "2" "and" "col" "x""#
        );
        assert!(SearchWords::from_text("").is_empty());
        assert!(SearchWords::from_text("\"' ; -- */ %_").is_empty());
        assert_eq!(
            SearchWords::from_text("Café ÜBER 東京").0,
            ["café", "über", "東京"]
        );
        let long = SearchWords::from_text(&"a".repeat(1_000));
        assert_eq!(long.0, ["a".repeat(MAX_WORD)]);
        let many = SearchWords::from_text(&"w ".repeat(500));
        assert_eq!(many.0.len(), MAX_WORDS);
    }
}
