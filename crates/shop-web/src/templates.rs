//! The templates and the small display types they take. Values are formatted
//! here (money, ids) so templates stay plain; askama escapes everything they print.

use askama::Template;
use serde::Serialize;
use shop_cache::domain::when::Utc;
use shop_db::items::Item;

/// Cents as dollars, e.g. `$12.34`.
pub fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let (dollars, cents) = (cents.unsigned_abs() / 100, cents.unsigned_abs() % 100);
    // Thousands grouped with commas, as shoppers read prices: $9,999.99.
    let digits = dollars.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    format!("{sign}${grouped}.{cents:02}")
}

/// An item as pages show it.
#[derive(Debug, Clone, Serialize)]
pub struct ItemView {
    /// The id.
    pub id: u64,
    /// The title.
    pub title: String,
    /// The price, formatted.
    pub price: String,
    /// Its picture's URL (versioned, immutable: [`crate::pictures`]).
    pub picture: String,
}

impl From<&Item> for ItemView {
    fn from(item: &Item) -> Self {
        Self {
            id: item.id.get(),
            title: item.title.clone(),
            price: money(item.price_cents),
            picture: crate::pictures::url(&item.category, item.id.get()),
        }
    }
}

/// `text` for a URL path segment or query value: letters, digits and `-._~` as
/// they are, every other byte of its UTF-8 as `%XX`.
pub fn url_encode(text: &str) -> String {
    encode(text, false)
}

/// `text` as [`url_encode`] writes it, but with the characters a path may hold
/// as they are (`!$&'()*+,;=:@`): how a browser sends a typed
/// `/c/Home%20&%20Garden`, and how a proxy that decodes and encodes paths again
/// (Apache's `ProxyPass`, nginx's `proxy_pass` with a URI) passes the shop's
/// own links on. The one other spelling of a path the shop serves.
pub fn url_encode_plain(text: &str) -> String {
    encode(text, true)
}

fn encode(text: &str, plain: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        let kept = plain
            && matches!(
                b,
                b'!' | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
            );
        if kept || b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A department link.
pub struct CategoryLink {
    /// Its name.
    pub name: String,
    /// `/c/<name>`.
    pub href: String,
}

impl CategoryLink {
    /// The links to these departments.
    pub fn all(names: &[String]) -> Vec<Self> {
        names
            .iter()
            .map(|name| Self {
                name: name.clone(),
                href: crate::browse::department_path(name),
            })
            .collect()
    }
}

/// `GET /`.
#[derive(Template)]
#[template(path = "home.html")]
pub struct HomePage {
    /// The most viewed items (none in a new shop).
    pub most_viewed: Vec<ItemView>,
    /// A few of every department, not among the most viewed.
    pub featured: Vec<ItemView>,
    /// The departments.
    pub categories: Vec<CategoryLink>,
}

/// `GET /items` and `GET /c/{category}`: one page of a listing, the same for
/// every visitor.
#[derive(Template)]
#[template(path = "listing.html")]
pub struct ListingPage {
    /// "All items" or the department's name.
    pub heading: String,
    /// Every department, for the side links.
    pub categories: Vec<String>,
    /// The department shown, if one is.
    pub current: Option<String>,
    /// The items of this page.
    pub items: Vec<ItemView>,
    /// The next page, if there is one.
    pub next: Option<String>,
    /// The first page, when this is not it.
    pub first: Option<String>,
}

impl ListingPage {
    /// The department links, the current one marked by the template.
    pub fn links(&self) -> Vec<CategoryLink> {
        CategoryLink::all(&self.categories)
    }

    /// Whether `name` is the department shown.
    pub fn is_current(&self, name: &str) -> bool {
        self.current.as_deref() == Some(name)
    }
}

/// `GET /search?q=`.
#[derive(Template)]
#[template(path = "search.html")]
pub struct SearchPage {
    /// What was typed (shown back in the box).
    pub q: String,
    /// Whether there were any words to search for.
    pub searched: bool,
    /// This page's number, from 1.
    pub page: u32,
    /// The results on this page, best first.
    pub items: Vec<ItemView>,
    /// The next page, if there is one.
    pub next: Option<String>,
    /// The page before, if there is one.
    pub previous: Option<String>,
}

/// `GET /items/{id}`: the same for every visitor.
#[derive(Template)]
#[template(path = "item.html")]
pub struct ItemPage {
    /// The item.
    pub item: ItemView,
    /// Its department.
    pub category: String,
    /// Its department's listing.
    pub category_href: String,
    /// Its description.
    pub description: String,
    /// The most of it a cart line may hold.
    pub max_quantity: u32,
    /// "In stock" or "Out of stock".
    pub stock: &'static str,
    /// `in-stock` or `out-of-stock`, for the style.
    pub stock_class: &'static str,
    /// The picture's width and height on the page.
    pub picture_size: u32,
    /// Its insights as `/api/items/{id}/insights` answers them, escaped for a
    /// script data block (see [`crate::insights::inline_json`]); none when they
    /// could not be read.
    pub insights: Option<String>,
    /// Its flash sale, while one runs or is coming: the page says so and links
    /// the sale page instead of offering "Add to cart" (the sale's units are sold
    /// only there until it ends; the cart refuses them, 409 `on_sale`).
    pub sale: Option<SaleNotice>,
}

/// What an item page says of the item's flash sale, running or coming.
#[derive(Debug, Clone)]
pub struct SaleNotice {
    /// The sentence, e.g. "On flash sale at $4.99 until 2026-11-28 14:05 UTC."
    pub text: String,
    /// When the sale ends, unix seconds: the page's script puts "Add to cart"
    /// back then (a page cached during the sale may be served a while after).
    pub end: i64,
}

impl SaleNotice {
    /// The notice of a sale at `price_cents` from `start` to `end` (unix
    /// seconds), as seen at `now`; none once it has ended.
    pub fn new(price_cents: i64, start: i64, end: i64, now: i64) -> Option<Self> {
        if end <= now {
            return None;
        }
        let price = money(price_cents);
        let text = if start <= now {
            format!("On flash sale at {price} until {}.", Utc(end))
        } else {
            format!(
                "In a flash sale at {price} from {} until {}.",
                Utc(start),
                Utc(end)
            )
        };
        Some(Self { text, end })
    }
}

/// One cart line as the cart page shows it.
pub struct CartLineView {
    /// The item.
    pub item: ItemView,
    /// How many.
    pub quantity: u32,
    /// The line's price (quantity x unit price), formatted.
    pub total: String,
    /// False for a retired item: shown as no longer available, not in the total.
    pub available: bool,
    /// Why checkout would refuse the line as it is, said before the shopper
    /// tries: the item's flash sale, or fewer units left than the line holds.
    pub note: Option<String>,
}

/// `GET /cart`.
#[derive(Template)]
#[template(path = "cart.html")]
pub struct CartPage {
    /// The lines.
    pub lines: Vec<CartLineView>,
    /// The total, formatted.
    pub total: String,
    /// A fresh idempotency key for the checkout form.
    pub checkout_key: String,
    /// What this page shows, for the checkout to confirm.
    pub cart_version: String,
    /// The most of one item a line may hold.
    pub max_quantity: u32,
    /// What changed since the page the shopper confirmed (a checkout refused).
    pub changes: Vec<String>,
    /// What a login just left out of the cart, said once after it.
    pub left_out: Option<String>,
    /// The logged-in user's name (the page's "Log out"), `None` for a guest.
    pub user_name: Option<String>,
}

/// `GET /admin/items/{id}`: an item's edit form, for admins.
#[derive(Template)]
#[template(path = "admin_item.html")]
pub struct AdminItemPage {
    /// The item.
    pub id: u64,
    /// Its fields as they are (or as typed, when refused).
    pub title: String,
    /// Its description.
    pub description: String,
    /// Its price in cents.
    pub price_cents: String,
    /// Its department.
    pub category: String,
    /// It is retired.
    pub retired: bool,
    /// The version the form edits (sent back with it, so an edit made meanwhile
    /// refuses this one instead of being reverted by it).
    pub version: i64,
    /// The last change was saved.
    pub saved: bool,
    /// Why the last change was refused.
    pub message: Option<String>,
    /// The fields an edit from an older version would have changed back: what
    /// was sent, against what the item holds now.
    pub differs: Vec<String>,
}

/// `GET /login`, and `POST /login` when it fails.
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// Where to go after logging in (a local path).
    pub next: String,
    /// The name typed last time, kept in the box.
    pub name: String,
    /// Why the last attempt failed.
    pub message: Option<String>,
    /// The form's one-time key: submitting the same form twice logs in once.
    pub key: String,
}

/// `GET /signup`, and `POST /signup` when it is refused.
#[derive(Template)]
#[template(path = "signup.html")]
pub struct SignupPage {
    /// Where to go after signing up (a local path).
    pub next: String,
    /// The name typed last time, kept in the box.
    pub name: String,
    /// Why the last attempt was refused.
    pub message: Option<String>,
    /// The form's one-time key: submitting the same form twice signs up once.
    pub key: String,
}

/// `GET /ops`: the operations page (admins only, never cached).
#[derive(Template)]
#[template(path = "ops.html")]
pub struct OpsPage {
    /// Live sessions.
    pub sessions: String,
    /// Page-cache hits over lookups since this process started.
    pub hit_ratio: String,
    /// Sessions this process's cleaner removed.
    pub cleaned: String,
    /// How overdue the most overdue cached row is.
    pub row_lag: String,
    /// The most viewed items.
    pub top: Vec<OpsTop>,
    /// Running sales and their stock in Redis.
    pub sales: Vec<OpsSale>,
    /// Seconds of history in the plots.
    pub seconds: usize,
    /// Requests per second (inline SVG, built from numbers only).
    pub rate_plot: String,
    /// p99 latency (inline SVG).
    pub p99_plot: String,
    /// Page-cache hits and misses per second (inline SVG).
    pub cache_plot: String,
}

/// A most-viewed item on the operations page.
pub struct OpsTop {
    /// Its id.
    pub id: u64,
    /// Its title.
    pub title: String,
    /// Its score in `viewed:`.
    pub score: String,
}

/// A running sale on the operations page.
pub struct OpsSale {
    /// The item.
    pub id: u64,
    /// Units left in Redis.
    pub stock: String,
}

/// One order on the account page.
pub struct OrderView {
    /// Its id.
    pub id: i64,
    /// `cart` or `flash`.
    pub kind: String,
    /// Units in all.
    pub units: i64,
    /// The total, formatted.
    pub total: String,
}

/// One of the user's sessions on the account page (their devices).
pub struct SessionView {
    /// Its opaque id (not the token).
    pub id: String,
    /// Browser and system, from the User-Agent.
    pub device: String,
    /// The network it logged in from (a /24 or a /48).
    pub network: String,
    /// When it logged in, as a person reads it ("3 days ago").
    pub created: String,
    /// When it was last seen, likewise.
    pub last_seen: String,
    /// The session of this very request.
    pub current: bool,
}

/// `GET /account`.
#[derive(Template)]
#[template(path = "account.html")]
pub struct AccountPage {
    /// The user's name.
    pub name: String,
    /// Their orders, newest first.
    pub orders: Vec<OrderView>,
    /// Their sessions, most recently seen first.
    pub sessions: Vec<SessionView>,
    /// The order a checkout just answered with, when the page follows one.
    pub placed: Option<PlacedNotice>,
}

/// What the account page says of the order a checkout answered with
/// (`/account?placed=ID`, `&again=1` for a checkout form sent again).
pub struct PlacedNotice {
    /// The order.
    pub id: i64,
    /// An earlier request with the same form placed it: nothing was ordered now.
    pub again: bool,
}

/// `GET /account/orders/{id}`: one of the user's orders, line by line.
#[derive(Template)]
#[template(path = "order.html")]
pub struct OrderPage {
    /// The logged-in user's name (the page's "Log out").
    pub name: String,
    /// The order.
    pub id: i64,
    /// `cart` or `flash`.
    pub kind: String,
    /// When it was placed, for people.
    pub placed: String,
    /// Its lines.
    pub lines: Vec<OrderLineView>,
    /// Units in all.
    pub units: i64,
    /// The total charged, formatted.
    pub total: String,
}

/// A line on the order page.
pub struct OrderLineView {
    /// The item's id (its page's link).
    pub item: u64,
    /// The item's title.
    pub title: String,
    /// Units bought.
    pub quantity: i64,
    /// Charged for each, formatted.
    pub price: String,
    /// Charged for the line, formatted.
    pub line_total: String,
}

/// `GET /account/password`.
#[derive(Template)]
#[template(path = "password.html")]
pub struct PasswordPage {
    /// What went wrong with the last try, if anything.
    pub message: Option<String>,
}

/// `GET /flash`: the sale shell, the same for everyone.
#[derive(Template)]
#[template(path = "flash.html")]
pub struct FlashPage {
    /// The items on sale (their stock, price and window come live, by script).
    pub items: Vec<SaleItem>,
}

/// An item on the sale page.
pub struct SaleItem {
    /// Its id.
    pub id: u64,
    /// Its title.
    pub title: String,
    /// Its regular price in cents.
    pub price_cents: i64,
    /// Its picture's URL.
    pub picture: String,
    /// Units the sale started with (for the stock bar), when known.
    pub units: i64,
    /// The demo sale `shop serve` started (marked as such on the page).
    pub demo: bool,
}

/// Any error, as a page.
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage<'a> {
    /// The HTTP status, as a number.
    pub status: u16,
    /// What went wrong, for a person.
    pub message: &'a str,
    /// The answer to a cart's form (a line, a checkout): the page links back
    /// to the cart.
    pub about_cart: bool,
}

impl ErrorPage<'_> {
    /// The page's heading: what kind of failure, in words.
    pub fn heading(&self) -> &'static str {
        match self.status {
            404 => "Not found",
            410 => "No longer sold",
            429 => "Too many tries",
            401 | 403 => "Not allowed",
            500.. => "The shop could not answer",
            _ => "That could not be done",
        }
    }
}

/// Renders a template (a failure is a bug: `WebError` makes it a logged 500).
pub fn render(page: &impl Template) -> Result<axum::response::Html<String>, askama::Error> {
    page.render().map(axum::response::Html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_formats_cents() {
        assert_eq!(money(0), "$0.00");
        assert_eq!(money(5), "$0.05");
        assert_eq!(money(1234), "$12.34");
        assert_eq!(money(100_000), "$1,000.00");
        assert_eq!(money(999_999), "$9,999.99");
        assert_eq!(money(12_345_678_901), "$123,456,789.01");
        assert_eq!(money(99_999), "$999.99");
        assert_eq!(money(-123_456), "-$1,234.56");
    }

    #[test]
    fn url_encoding_keeps_only_unreserved_bytes() {
        assert_eq!(url_encode("kitchen"), "kitchen");
        assert_eq!(url_encode("a b&c/d?e"), "a%20b%26c%2Fd%3Fe");
        assert_eq!(url_encode("café"), "caf%C3%A9");
    }

    #[test]
    fn pages_escape_what_they_print() {
        let page = ErrorPage {
            status: 400,
            message: "<script>alert(1)</script>",
            about_cart: false,
        };
        let html = page.render().unwrap();
        assert!(!html.contains("<script>alert"), "{html}");
    }
}
