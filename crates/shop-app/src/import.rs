//! The catalogue import file: JSON Lines, one item a line, every line checked
//! before anything is written.
//!
//! A line is an object with `id`, `title`, `description`, `price_cents`,
//! `category` and, optionally, `stock` (the units of an item the import adds;
//! ignored for an item that exists). Unknown fields are an error (a misspelt
//! `price` must not pass as "no price change"), blank lines are skipped, and an id
//! may appear once.

use std::collections::HashMap;
use std::io::{BufRead, Read};

use serde::Deserialize;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::ItemFields;
use shop_db::inventory::MAX_STOCK;

/// One checked line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportLine {
    /// The item.
    pub id: ItemId,
    /// Its fields.
    pub fields: ItemFields,
    /// Units in stock if the import adds it.
    pub stock: i64,
}

/// Why a file was refused: the first bad line, by number (from 1).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A line that is not a valid item.
    #[error("line {line}: {message}")]
    BadLine {
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The file could not be read.
    #[error("reading the file")]
    Read(#[from] std::io::Error),
}

/// The longest line read, in bytes: an item's fields with room to spare. A
/// longer one is refused as it is read, not held whole in memory first.
pub const MAX_LINE: usize = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine {
    id: u64,
    title: String,
    description: String,
    price_cents: i64,
    category: String,
    #[serde(default)]
    stock: i64,
}

/// Reads and checks every line of `input`.
pub fn parse(mut input: impl BufRead) -> Result<Vec<ImportLine>, ImportError> {
    let mut lines = Vec::new();
    let mut seen: HashMap<ItemId, usize> = HashMap::new();
    let mut bytes = Vec::new();
    for number in 1.. {
        let bad = |message: String| ImportError::BadLine {
            line: number,
            message,
        };
        bytes.clear();
        let read = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut bytes)?;
        if read == 0 {
            break;
        }
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        } else if read > MAX_LINE {
            return Err(bad(format!("longer than {MAX_LINE} bytes")));
        }
        let Ok(mut text) = String::from_utf8(std::mem::take(&mut bytes)) else {
            return Err(bad("not UTF-8 text".into()));
        };
        // A file saved by an editor that marks its encoding (Windows' "UTF-8"
        // does) starts with a byte-order mark: not part of the first line.
        if number == 1 && text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
        if text.trim().is_empty() {
            continue;
        }
        let raw: RawLine = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let id = ItemId::new(raw.id).map_err(|e| bad(e.to_string()))?;
        let fields = ItemFields::new(&raw.title, &raw.description, raw.price_cents, &raw.category)
            .map_err(|e| bad(e.to_string()))?;
        if !(0..=MAX_STOCK).contains(&raw.stock) {
            return Err(bad(format!("stock must be 0 to {MAX_STOCK}")));
        }
        if let Some(first) = seen.insert(id, number) {
            return Err(bad(format!("item {id} is also on line {first}")));
        }
        lines.push(ImportLine {
            id,
            fields,
            stock: raw.stock,
        });
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: u64, price: i64) -> String {
        format!(
            r#"{{"id":{id},"title":"T{id}","description":"D","price_cents":{price},"category":"kitchen"}}"#
        )
    }

    #[test]
    fn good_lines_are_read_and_blank_ones_skipped() {
        let text = format!("{}\n\n{}\n", line(1, 100), line(2, 0));
        let got = parse(text.as_bytes()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].id.get(), 2);
        assert_eq!(got[0].fields.price_cents, 100);
    }

    #[test]
    fn a_byte_order_mark_before_the_first_line_is_no_part_of_it() {
        let text = format!("\u{feff}{}\n{}\n", line(1, 100), line(2, 0));
        let got = parse(text.as_bytes()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].id.get(), 1);
        // Elsewhere it is a character like any other: the line does not parse.
        let text = format!("{}\n\u{feff}{}\n", line(1, 100), line(2, 0));
        assert!(matches!(
            parse(text.as_bytes()),
            Err(ImportError::BadLine { line: 2, .. })
        ));
    }

    #[test]
    fn a_bad_line_is_named_by_its_number() {
        let cases = [
            (format!("{}\n{}", line(1, 1), line(2, -5)), 2, "price"),
            (format!("{}\nnot json", line(1, 1)), 2, "expected"),
            (format!("{}\n{}", line(1, 1), line(1, 2)), 2, "line 1"),
            (line(0, 1), 1, "item id"),
            (
                r#"{"id":1,"title":"","description":"","price_cents":1,"category":"c"}"#.into(),
                1,
                "title",
            ),
            (
                r#"{"id":1,"title":"t","description":"","price":1,"category":"c"}"#.into(),
                1,
                "price",
            ),
            (
                r#"{"id":1,"title":"t","description":"","price_cents":1,"category":"c","stock":1000000001}"#.into(),
                1,
                "stock must be 0 to 1000000000",
            ),
            (
                r#"{"id":1,"title":"t","description":"","price_cents":1,"category":"c","stock":-1}"#.into(),
                1,
                "stock must be 0",
            ),
        ];
        for (text, at, says) in cases {
            match parse(text.as_bytes()) {
                Err(ImportError::BadLine { line, message }) => {
                    assert_eq!(line, at, "{text}: {message}");
                    assert!(message.contains(says), "{text}: {message}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_line_of_bytes_not_text_or_too_long_is_named_by_its_number() {
        let mut bytes = format!("{}\r\n", line(1, 1)).into_bytes();
        bytes.extend_from_slice(b"{\"id\":2,\"title\":\"\xff\"}\n");
        match parse(&bytes[..]) {
            Err(ImportError::BadLine { line: 2, message }) => {
                assert!(message.contains("UTF-8"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // Refused as it is read: the long line is never held whole.
        let long = format!("{}\n{}{}\n", line(1, 1), line(2, 1), " ".repeat(MAX_LINE));
        match parse(long.as_bytes()) {
            Err(ImportError::BadLine { line: 2, message }) => {
                assert!(message.contains("longer than"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // A last line without its newline, and one of exactly the limit, are read.
        let last = format!("{}\n{}", line(1, 1), line(2, 1));
        assert_eq!(parse(last.as_bytes()).unwrap().len(), 2);
        let padded = line(3, 1);
        let padded = format!("{padded}{}", " ".repeat(MAX_LINE - padded.len()));
        assert_eq!(parse(padded.as_bytes()).unwrap().len(), 1);
    }
}
