//! The rules an item's fields follow, wherever they come from (a command's flags,
//! an import line, the admin form): checked once here, so every way in refuses the
//! same input with the same words.

use crate::InvalidInput;

/// Longest title, in characters.
pub const MAX_TITLE: usize = 200;
/// Longest description, in characters.
pub const MAX_DESCRIPTION: usize = 10_000;
/// Longest department name, in characters (also the longest in a `/c/` URL).
pub const MAX_CATEGORY: usize = 100;
/// Highest price, in cents (ten million in money): a typo guard, far above any
/// real item, and far below where a cart total could overflow.
pub const MAX_PRICE_CENTS: i64 = 1_000_000_000;

/// An item's title: trimmed, 1 to [`MAX_TITLE`] characters, no control
/// characters or direction overrides.
pub fn title(raw: &str) -> Result<String, InvalidInput> {
    text(raw, MAX_TITLE, false).ok_or(InvalidInput::Title)
}

/// An item's description: trimmed, up to [`MAX_DESCRIPTION`] characters (may be
/// empty; line breaks allowed, other control characters and direction
/// overrides not).
pub fn description(raw: &str) -> Result<String, InvalidInput> {
    let trimmed = raw.trim();
    let ok = trimmed.chars().count() <= MAX_DESCRIPTION
        && !trimmed.chars().any(|c| {
            (c.is_control() && c != '\n' && c != '\r' && c != '\t') || overrides_direction(c)
        });
    ok.then(|| trimmed.to_owned())
        .ok_or(InvalidInput::Description)
}

/// A department: trimmed, 1 to [`MAX_CATEGORY`] characters, no control
/// characters or direction overrides, no `/` and not `.` or `..` (it is a path segment of
/// `/c/{category}`, and a browser reads a link to `/c/..` as one to `/`, even
/// percent-encoded).
pub fn category(raw: &str) -> Result<String, InvalidInput> {
    text(raw, MAX_CATEGORY, false)
        .filter(|c| !c.contains('/') && c != "." && c != "..")
        .ok_or(InvalidInput::Category)
}

/// A price in cents: 0 to [`MAX_PRICE_CENTS`].
pub fn price_cents(cents: i64) -> Result<i64, InvalidInput> {
    if (0..=MAX_PRICE_CENTS).contains(&cents) {
        Ok(cents)
    } else {
        Err(InvalidInput::Price)
    }
}

fn text(raw: &str, max: usize, may_be_empty: bool) -> Option<String> {
    let trimmed = raw.trim();
    let n = trimmed.chars().count();
    let ok = (may_be_empty || n > 0)
        && n <= max
        && !trimmed
            .chars()
            .any(|c| c.is_control() || overrides_direction(c));
    ok.then(|| trimmed.to_owned())
}

/// Whether `c` is one of Unicode's explicit direction embeddings, overrides or
/// isolates (U+202A-U+202E, U+2066-U+2069), which turn the text after them
/// around on the page: `Kettle\u{202e}llaB` shows as "KettleBall". The marks
/// a right-to-left title needs (U+200E, U+200F) are allowed.
fn overrides_direction(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// An item's four fields, each checked by the rules above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemFields {
    /// Short name.
    pub title: String,
    /// Longer text.
    pub description: String,
    /// Regular price in cents.
    pub price_cents: i64,
    /// Department.
    pub category: String,
}

impl ItemFields {
    /// Checks every field; the first that breaks its rule is the error.
    pub fn new(
        title: &str,
        description: &str,
        price_cents: i64,
        category: &str,
    ) -> Result<Self, InvalidInput> {
        Ok(Self {
            title: self::title(title)?,
            description: self::description(description)?,
            price_cents: self::price_cents(price_cents)?,
            category: self::category(category)?,
        })
    }
}

/// A change to some of an item's fields (`None`: left as it is), each checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemEdit {
    /// A new title.
    pub title: Option<String>,
    /// A new description.
    pub description: Option<String>,
    /// A new price in cents.
    pub price_cents: Option<i64>,
    /// A new department.
    pub category: Option<String>,
}

impl ItemEdit {
    /// Checks each given field.
    pub fn new(
        title: Option<&str>,
        description: Option<&str>,
        price_cents: Option<i64>,
        category: Option<&str>,
    ) -> Result<Self, InvalidInput> {
        Ok(Self {
            title: title.map(self::title).transpose()?,
            description: description.map(self::description).transpose()?,
            price_cents: price_cents.map(self::price_cents).transpose()?,
            category: category.map(self::category).transpose()?,
        })
    }

    /// True when it changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// `fields` with this edit applied.
    pub fn apply(&self, fields: &ItemFields) -> ItemFields {
        ItemFields {
            title: self.title.clone().unwrap_or_else(|| fields.title.clone()),
            description: self
                .description
                .clone()
                .unwrap_or_else(|| fields.description.clone()),
            price_cents: self.price_cents.unwrap_or(fields.price_cents),
            category: self
                .category
                .clone()
                .unwrap_or_else(|| fields.category.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_fields_are_trimmed() {
        let f = ItemFields::new("  Kettle ", "A kettle.\nBoils.", 1999, " kitchen ").unwrap();
        assert_eq!(f.title, "Kettle");
        assert_eq!(f.description, "A kettle.\nBoils.");
        assert_eq!(f.category, "kitchen");
        assert!(
            ItemFields::new("K", "", 0, "k").is_ok(),
            "free, no description"
        );
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        let cases = [
            (("", "d", 1, "c"), InvalidInput::Title),
            (("   ", "d", 1, "c"), InvalidInput::Title),
            (("a\u{7}b", "d", 1, "c"), InvalidInput::Title),
            (
                (&*"t".repeat(MAX_TITLE + 1), "d", 1, "c"),
                InvalidInput::Title,
            ),
            (("t", "\u{0}", 1, "c"), InvalidInput::Description),
            (("t", "d", -1, "c"), InvalidInput::Price),
            (("t", "d", MAX_PRICE_CENTS + 1, "c"), InvalidInput::Price),
            (("t", "d", 1, ""), InvalidInput::Category),
            (("t", "d", 1, "a/b"), InvalidInput::Category),
            (("t", "d", 1, "."), InvalidInput::Category),
            (("Kettle\u{202e}llaB", "d", 1, "c"), InvalidInput::Title),
            (("t", "a \u{2067}b", 1, "c"), InvalidInput::Description),
            (("t", "d", 1, "x\u{202a}"), InvalidInput::Category),
            (("t", "d", 1, " .. "), InvalidInput::Category),
        ];
        for ((t, d, p, c), want) in cases {
            assert_eq!(
                ItemFields::new(t, d, p, c),
                Err(want.clone()),
                "{t:?} {d:?} {p} {c:?}"
            );
        }
        assert_eq!(
            ItemEdit::new(None, None, Some(-5), None),
            Err(InvalidInput::Price)
        );
    }

    #[test]
    fn an_edit_changes_only_what_it_names() {
        let f = ItemFields::new("Kettle", "d", 100, "kitchen").unwrap();
        let e = ItemEdit::new(None, None, Some(250), None).unwrap();
        assert!(!e.is_empty() && ItemEdit::default().is_empty());
        let g = e.apply(&f);
        assert_eq!((g.price_cents, g.title.as_str()), (250, "Kettle"));
    }
}
