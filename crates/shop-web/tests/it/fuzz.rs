//! A property test over the whole router: arbitrary requests (methods, real and
//! made-up paths, odd ids, query strings, cookies, form bodies, headers) against one
//! shop with a real redis-server and SQLite file.
//!
//! For every request: no panic and no 5xx (a panic in a handler would come back as
//! a 500 from the panic-catching layer). For every request answered 4xx: nothing
//! changed, neither in Redis (every key and its value, but for the session
//! bookkeeping every request does, see [`bookkeeping`]) nor in the orders table.
//!
//! `PROPTEST_CASES` overrides the number of cases; the counts per status class are
//! printed at the end (`cargo test -p shop-web --test it fuzz -- --nocapture`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, header};
use http_body_util::BodyExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use shop_cache::domain::{ItemId, UserId};
use shop_cache::keys::Keys;
use shop_cache::session::{SessionToken, Sessions, Touch};

use shop_testapp::{ITEMS, RedisWaits, TestApp};

/// Cases per run: about 2,000 keeps the test well under a minute in a debug build.
const CASES: u32 = 2_000;

/// The item on flash sale (and with a cached inventory row).
const SALE_ITEM: u64 = 2;

/// The accounts: `fuzz0`.. with this password. The fuzz logs in with the right
/// password too, so login's redirect is reached; several names, because the login
/// limiter allows each name only a few attempts a minute.
const USERS: u32 = 8;
const PASSWORD: &str = "fuzz-password";

// ---------------------------------------------------------------- the requests

/// Bytes shown as a byte string, so a failing case prints readably.
#[derive(Clone, PartialEq)]
struct Raw(Vec<u8>);

impl fmt::Debug for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// One cookie in a `Cookie` header.
#[derive(Debug, Clone)]
enum Cookie {
    /// `shop_session=` a live guest session's token.
    Guest,
    /// `shop_session=` a live session logged in as [`USER`].
    User,
    /// `shop_session=` a well-formed token the shop never issued.
    Unknown(String),
    /// `shop_session=` anything.
    Session(Raw),
    /// `shop_session=` 5,000 characters.
    Oversized,
    /// Any `name=value` text.
    Other(Raw),
}

#[derive(Debug, Clone)]
enum BodyKind {
    /// `a=b&c=d` (each part already encoded, or deliberately not).
    Form(Vec<(String, String)>),
    /// Any bytes.
    Raw(Raw),
    /// Over the 64 KiB body limit.
    Huge,
}

#[derive(Debug, Clone)]
struct Case {
    /// What the case aims at, for the counts at the end.
    target: &'static str,
    method: Method,
    /// Path and query.
    uri: String,
    /// Each inner list is one `Cookie` header.
    cookies: Vec<Vec<Cookie>>,
    headers: Vec<(&'static str, Raw)>,
    content_type: Option<Raw>,
    body: Option<BodyKind>,
}

impl Case {
    fn uses(&self, wanted: fn(&Cookie) -> bool) -> bool {
        self.cookies.iter().flatten().any(wanted)
    }
}

/// Percent-encodes every byte but the unreserved ones.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn pick(options: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    prop::sample::select(options).prop_map(str::to_owned)
}

/// Any text, percent-encoded (unicode, control characters, anything).
fn encoded_text() -> impl Strategy<Value = String> + Clone {
    prop::collection::vec(any::<char>(), 0..8)
        .prop_map(|c| encode(&c.into_iter().collect::<String>()))
}

/// Item ids: real, unknown, zero, negative, huge, not numbers, encoded, unicode.
fn id() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => (1..=ITEMS + 5).prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        1 => "[a-zA-Z_~.-]{1,8}",
        1 => encoded_text(),
        2 => pick(&[
            "0", "-1", "-0", "01", "+1", "%2B1", "%31", "%32%30", "1.0", "1e3", "0x1",
            "18446744073709551615", "18446744073709551616", "99999999999999999999999",
            "9223372036854775808", "%E2%82%AC", "%C3%A9t%C3%A9", "%FF", "%FE%FF", "%00",
            "1%00", "%201", "1%20", "1%2F2", "%2e%2e", "..", "",
        ]),
    ]
}

/// Numbers for counts: ordinary, negative, the edges of the integer types, not numbers.
fn number() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => (0i64..=40).prop_map(|n| n.to_string()),
        1 => (-40i64..0).prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        2 => pick(&[
            "99", "100", "255", "256", "65536", "4294967295", "4294967296",
            "9223372036854775807", "9223372036854775808", "-9223372036854775808",
            "99999999999999999999999", "", "+", "+3", "%2B3", "%2D1", "3.5", "1e3", "0x10",
            "abc", "%20%203%20", "%E2%82%AC", "%ZZ", "%FF", "%00", "1%00", "%0A1",
        ]),
    ]
}

/// `next` values: local paths, other sites, control characters, bad escapes.
fn next() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        2 => encoded_text().prop_map(|t| format!("%2F{t}")),
        2 => "%2F[a-zA-Z0-9._~-]{0,12}",
        1 => encoded_text(),
        3 => pick(&[
            "%2F", "%2Fcart", "%2Faccount", "/cart", "%2Fcart%0A", "%2F%0D%0ASet-Cookie:%20x=1",
            "%2F%00", "%2F%7F", "%2F%09", "%2F%1B[31m", "%2F%2Fevil.example",
            "https%3A%2F%2Fevil.example%2F", "%2F%5Cevil", "%2F%E2%82%AC", "%2F%FF",
            "%ZZ", "%", "%2",
        ]),
    ]
}

/// Idempotency keys, for forms and the header: valid, empty, long, not ASCII.
fn key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        3 => "[A-Za-z0-9_-]{1,30}",
        1 => encoded_text(),
        1 => pick(&["", "%20", "a%20b", "%0A", "%FF", "%ZZ"]),
        1 => Just("k".repeat(101)),
    ]
}

/// Any value of a form field or a query parameter.
fn value() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        2 => number(),
        1 => id(),
        1 => next(),
        1 => key(),
        1 => "[a-zA-Z0-9]{0,12}",
        1 => Just("A".repeat(300)),
        1 => pick(&["fuzz0", "fuzz-password", "a+b", "%26", "%3D", "="]),
    ]
}

fn field_name() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => pick(&["item", "count", "name", "password", "next", "key", "_"]),
        1 => encoded_text(),
        1 => pick(&["", "%ZZ", "%FF", "item%00", "ITEM", "count[]"]),
    ]
}

/// Header values: ordinary ones and any bytes a header may carry (obs-text too).
fn header_bytes(options: &'static [&'static str]) -> impl Strategy<Value = Raw> + Clone {
    let garbage = prop::collection::vec(
        prop_oneof![8 => 0x20u8..0x7f, 1 => 0x80u8..=0xff, 1 => Just(b'\t')],
        0..40,
    );
    prop_oneof![
        4 => prop::sample::select(options).prop_map(|s| Raw(s.as_bytes().to_vec())),
        1 => garbage.prop_map(Raw),
    ]
}

fn token_text() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        // Decodes to 16 bytes: the last character carries no stray bits.
        "[A-Za-z0-9_-]{21}[AQgw]",
        "[A-Za-z0-9_-]{22}",
        "[A-Za-z0-9_=+/.-]{20,24}",
    ]
}

fn cookie() -> impl Strategy<Value = Cookie> {
    prop_oneof![
        4 => Just(Cookie::Guest),
        4 => Just(Cookie::User),
        2 => token_text().prop_map(Cookie::Unknown),
        1 => header_bytes(&["", "x", "%00", "\"AAAAAAAAAAAAAAAAAAAAAA\""]).prop_map(Cookie::Session),
        1 => Just(Cookie::Oversized),
        1 => header_bytes(&["a=b", "shop_session", "=", ";", "shop_session ="]).prop_map(Cookie::Other),
    ]
}

/// The `Cookie` headers: mostly one live session's, as a browser sends; else any mix.
fn cookies() -> impl Strategy<Value = Vec<Vec<Cookie>>> {
    prop_oneof![
        2 => Just(Vec::new()),
        3 => Just(vec![vec![Cookie::User]]),
        2 => Just(vec![vec![Cookie::Guest]]),
        3 => prop::collection::vec(prop::collection::vec(cookie(), 1..4), 1..3),
    ]
}

fn segment() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "[a-zA-Z0-9._~-]{0,10}",
        encoded_text(),
        pick(&[
            "..", ".", "%2e%2e", "%2F", "items", "api", "cart", "%FF", "%00"
        ]),
    ]
}

/// Any method, path and body: the routes, and what is beside them.
fn anything() -> impl Strategy<Value = (Method, String, Option<BodyKind>)> {
    let fixed = &[
        "/",
        "/cart",
        "/login",
        "/logout",
        "/account",
        "/checkout",
        "/flash",
        "/api/me",
        "/healthz",
        "/metrics",
        "/static/shop.js",
        "/items",
        "/api/flash",
        "/search",
        "/signup",
        "/c/kitchen",
        "/c",
    ];
    let path = prop_oneof![
        3 => pick(fixed),
        2 => id().prop_map(|id| format!("/items/{id}")),
        1 => id().prop_map(|id| format!("/api/inventory/{id}")),
        1 => id().prop_map(|id| format!("/api/flash/{id}/buy")),
        1 => id().prop_map(|id| format!("/api/items/{id}/insights")),
        1 => prop::collection::vec(segment(), 0..4).prop_map(|s| format!("/{}", s.join("/"))),
        1 => (pick(fixed), segment()).prop_map(|(p, s)| format!("{p}/{s}")),
    ];
    (method(), path, prop::option::weighted(0.5, body()))
}

/// What a case aims at: mostly what the shop's pages and scripts send, with odd
/// values; some anything at all. Each is then mutated (another method, another body).
fn target() -> impl Strategy<Value = (&'static str, Method, String, Option<BodyKind>)> {
    let form = |fields: Vec<(&str, String)>| {
        Some(BodyKind::Form(
            fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        ))
    };
    let pages = &[
        "/",
        "/cart",
        "/login",
        "/account",
        "/flash",
        "/api/me",
        "/healthz",
        "/metrics",
        "/items",
        "/search",
        "/signup",
        "/c/kitchen",
        "/c/tools",
    ];
    prop_oneof![
        3 => id().prop_map(|id| ("item page", Method::GET, format!("/items/{id}"), None)),
        2 => pick(pages).prop_map(|p| ("page", Method::GET, p, None)),
        1 => id().prop_map(|id| ("inventory", Method::GET, format!("/api/inventory/{id}"), None)),
        1 => id().prop_map(|id| ("insights", Method::GET, format!("/api/items/{id}/insights"), None)),
        3 => (id(), number()).prop_map(move |(i, c)| {
            ("cart", Method::POST, "/cart".to_owned(), form(vec![("item", i), ("count", c)]))
        }),
        2 => (0..USERS, next()).prop_map(move |(u, n)| {
            let fields = vec![
                ("name", format!("fuzz{u}")),
                ("password", PASSWORD.to_owned()),
                ("next", n),
            ];
            ("login", Method::POST, "/login".to_owned(), form(fields))
        }),
        1 => (value(), value()).prop_map(move |(n, p)| {
            let fields = vec![("name", n), ("password", p)];
            ("bad login", Method::POST, "/login".to_owned(), form(fields))
        }),
        1 => (value(), value()).prop_map(move |(n, p)| {
            let fields = vec![("name", n), ("password", p)];
            ("signup", Method::POST, "/signup".to_owned(), form(fields))
        }),
        1 => Just(("logout", Method::POST, "/logout".to_owned(), None)),
        2 => key().prop_map(move |k| {
            ("checkout", Method::POST, "/checkout".to_owned(), form(vec![("key", k)]))
        }),
        2 => prop_oneof![Just(SALE_ITEM.to_string()), id()]
            .prop_map(|id| ("flash buy", Method::POST, format!("/api/flash/{id}/buy"), None)),
        3 => anything().prop_map(|(m, p, b)| ("anything", m, p, b)),
    ]
}

fn query() -> impl Strategy<Value = String> {
    let pairs = prop::collection::vec(
        (
            prop_oneof![
                4 => pick(&["next", "_", "item", "count", "utm_source", "q", "page", "after"]),
                1 => field_name(),
            ],
            value(),
        ),
        1..4,
    )
    .prop_map(|pairs| {
        let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("?{}", pairs.join("&"))
    });
    prop_oneof![
        6 => Just(String::new()),
        3 => pairs,
        1 => pick(&["?", "?&", "?=", "?&&=&", "?_", "?_=", "?next", "?%", "?next=%"]),
    ]
}

fn body() -> impl Strategy<Value = BodyKind> {
    prop_oneof![
        12 => prop::collection::vec((field_name(), value()), 0..6).prop_map(BodyKind::Form),
        2 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| BodyKind::Raw(Raw(b))),
        1 => Just(BodyKind::Huge),
    ]
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        4 => Just(Method::GET),
        4 => Just(Method::POST),
        1 => Just(Method::HEAD),
        1 => Just(Method::PUT),
        1 => Just(Method::DELETE),
    ]
}

/// Where the request says it comes from: mostly nothing (a plain client), else the
/// shop's own pages, or another site, or nonsense.
fn site() -> impl Strategy<Value = Vec<(&'static str, Raw)>> {
    let raw = |s: &str| Raw(s.as_bytes().to_vec());
    prop_oneof![
        8 => Just(Vec::new()),
        2 => Just(vec![("sec-fetch-site", raw("same-origin"))]),
        2 => Just(vec![("origin", raw("http://shop.example")), ("host", raw("shop.example"))]),
        1 => header_bytes(&["same-site", "cross-site", "none", ""])
            .prop_map(|v| vec![("sec-fetch-site", v)]),
        1 => (
            header_bytes(&["http://shop.example", "https://SHOP.example", "http://evil.example", "null"]),
            prop::option::of(header_bytes(&["shop.example", "evil.example", ""])),
        )
            .prop_map(|(origin, host)| {
                let mut h = vec![("origin", origin)];
                h.extend(host.map(|host| ("host", host)));
                h
            }),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(&'static str, Raw)>> {
    let one = |name: &'static str, p: f64, values: &'static [&'static str]| {
        prop::option::weighted(p, header_bytes(values)).prop_map(move |v| v.map(|v| (name, v)))
    };
    (
        site(),
        one(
            "accept",
            0.4,
            &[
                "application/json",
                "text/html",
                "*/*",
                "text/html, application/json;q=0.9",
            ],
        ),
        one("if-none-match", 0.2, &["*", "\"abc\"", "W/\"abc\"", "\"\""]),
        one(
            "accept-encoding",
            0.3,
            &[
                "gzip",
                "br",
                "zstd",
                "deflate",
                "identity",
                "gzip;q=0, br",
                "*",
                "identity;q=0",
            ],
        ),
        one(
            "idempotency-key",
            0.8,
            &[
                "k1",
                "k2",
                "k3",
                "AAAAAAAAAAAAAAAAAAAAAA",
                "",
                "a b",
                "\u{e9}",
            ],
        ),
    )
        .prop_map(|(site, a, b, c, d)| {
            site.into_iter()
                .chain([a, b, c, d].into_iter().flatten())
                .collect()
        })
}

/// Mostly a form's, as the shop's pages send.
fn content_type() -> impl Strategy<Value = Raw> {
    let form = "application/x-www-form-urlencoded";
    prop_oneof![
        6 => Just(Raw(form.as_bytes().to_vec())),
        1 => header_bytes(&[
            "application/x-www-form-urlencoded; charset=utf-8",
            "APPLICATION/X-WWW-FORM-URLENCODED",
            "application/json",
            "text/plain",
            "multipart/form-data",
        ]),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        target(),
        prop::option::weighted(0.15, method()),
        prop::option::weighted(0.15, prop::option::of(body())),
        query(),
        cookies(),
        headers(),
        prop::option::weighted(0.95, content_type()),
    )
        .prop_map(
            |(
                (target, method, path, body),
                other_method,
                other_body,
                query,
                cookies,
                headers,
                content_type,
            )| Case {
                target,
                method: other_method.unwrap_or(method),
                uri: format!("{path}{query}"),
                cookies,
                headers,
                content_type,
                body: other_body.unwrap_or(body),
            },
        )
}

// ---------------------------------------------------------------- the shop

/// What the invariant compares: Redis (by key, each value in a canonical form) and
/// the number of orders.
#[derive(Debug, PartialEq)]
struct Snapshot {
    redis: BTreeMap<String, Stored>,
    orders: i64,
}

#[derive(Debug, PartialEq)]
enum Stored {
    String(Option<Raw>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// Members with their scores, in rank order.
    ZSet(Vec<(Vec<u8>, String)>),
    Set(BTreeSet<Vec<u8>>),
    List(Vec<Vec<u8>>),
    Other(String),
}

/// Keys every request may change without that being its effect: the session
/// bookkeeping of a touch (`recent:` gets the time, and `guests:` for a guest or
/// `anonymous:` for a cart without a login; an item view goes to the
/// session's `viewed:<token>`, the `viewed:` ranking and the item's `viewers:`), and
/// the login limiter's attempt counters (`limit:`), whose purpose is to count the
/// failed attempts (and the buys per account), which are 4xx by definition, and the
/// flash sale's remembered answers (`sale-answers:`, one per unit the database
/// recorded: a settled reservation's answer, such as `expired`, is a 409 that is
/// the sale's answer, not bad input), and the page cache's purge bookkeeping (`page-purges`,
/// one hash per shop, started by the first render of any page, a 404's included).
/// Bad input never reaches them: it is refused before Redis is asked.
fn bookkeeping(key: &str) -> bool {
    key == "recent:"
        || key == "page-purges"
        || key == "guests:"
        || key == "anonymous:"
        || key.starts_with("viewed:")
        || key.starts_with("viewers:")
        || key.starts_with("limit:")
        || key.starts_with("sale-answers:")
}

struct Shop {
    app: TestApp,
    raw: redis::aio::MultiplexedConnection,
    /// For the test's own sessions, beside the router's.
    sessions: Sessions,
    /// The account the `User` cookie is logged in as.
    user_id: UserId,
    /// The live guest and logged-in tokens the `Guest` and `User` cookies send.
    guest: RefCell<SessionToken>,
    user: RefCell<SessionToken>,
    /// Answers per target and status.
    statuses: RefCell<BTreeMap<(&'static str, u16), u32>>,
}

impl Shop {
    async fn start() -> Self {
        let app = TestApp::builder().waits(RedisWaits::Shop).start().await;
        let mut user_id = None;
        for u in 0..USERS {
            let id = app
                .db
                .create_user(&format!("fuzz{u}"), PASSWORD)
                .await
                .unwrap();
            user_id = user_id.or(id);
        }
        app.start_sale(SALE_ITEM, 5, 100).await;
        let sale_item = ItemId::new(SALE_ITEM).unwrap();
        let mut raw = app.redis.conn().await;
        let row = app.db.inventory_json(sale_item).await.unwrap().unwrap();
        let _: () = redis::cmd("SET")
            .arg(Keys::default().inventory(sale_item))
            .arg(row)
            .query_async(&mut raw)
            .await
            .unwrap();
        let sessions = Sessions::new(app.conn.clone(), Keys::default());
        Self {
            app,
            raw,
            sessions,
            user_id: user_id.unwrap(),
            // Not live yet: the first case that sends them makes them live.
            guest: RefCell::new(SessionToken::generate()),
            user: RefCell::new(SessionToken::generate()),
            statuses: RefCell::default(),
        }
    }

    async fn send(&self, req: Request<Body>) -> (u16, Vec<u8>) {
        let resp = self.app.send(req).await;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        (status, body)
    }

    /// Makes the `Guest` and `User` cookies name live sessions again (a case may
    /// have logged them out, or logged the guest in), outside the compared window,
    /// through the session store (a login form would meet the login limiter).
    async fn refresh_tokens(&self, case: &Case) {
        if case.uses(|c| matches!(c, Cookie::Guest)) {
            let guest = self.guest.borrow().clone();
            if self.sessions.check_token(&guest).await.unwrap().is_some()
                || !self.live(&guest).await
            {
                let fresh = SessionToken::generate();
                self.sessions.touch(&fresh, Touch::request()).await.unwrap();
                *self.guest.borrow_mut() = fresh;
            }
        }
        if case.uses(|c| matches!(c, Cookie::User)) {
            let user = self.user.borrow().clone();
            if self.sessions.check_token(&user).await.unwrap() != Some(self.user_id) {
                let fresh = SessionToken::generate();
                self.sessions.touch(&fresh, Touch::request()).await.unwrap();
                let fresh = self
                    .sessions
                    .login(&fresh, self.user_id, None)
                    .await
                    .unwrap();
                *self.user.borrow_mut() = fresh;
            }
        }
    }

    /// Whether the token is a session the shop knows (guest or not).
    async fn live(&self, token: &SessionToken) -> bool {
        let seen: Option<f64> = redis::cmd("ZSCORE")
            .arg("recent:")
            .arg(token.expose())
            .query_async(&mut self.raw.clone())
            .await
            .unwrap();
        seen.is_some()
    }

    fn request(&self, case: &Case) -> Request<Body> {
        let mut req = Request::builder()
            .method(case.method.clone())
            .uri(case.uri.as_str());
        for cookies in &case.cookies {
            let mut line = Vec::new();
            for (i, c) in cookies.iter().enumerate() {
                if i > 0 {
                    line.extend_from_slice(b"; ");
                }
                match c {
                    Cookie::Guest => line
                        .extend(format!("shop_session={}", self.guest.borrow().expose()).bytes()),
                    Cookie::User => {
                        line.extend(format!("shop_session={}", self.user.borrow().expose()).bytes())
                    }
                    Cookie::Unknown(t) => line.extend(format!("shop_session={t}").bytes()),
                    Cookie::Session(Raw(v)) => {
                        line.extend_from_slice(b"shop_session=");
                        line.extend_from_slice(v);
                    }
                    Cookie::Oversized => {
                        line.extend(format!("shop_session={}", "A".repeat(5_000)).bytes())
                    }
                    Cookie::Other(Raw(v)) => line.extend_from_slice(v),
                }
            }
            req = req.header(header::COOKIE, HeaderValue::from_bytes(&line).unwrap());
        }
        for (name, Raw(value)) in &case.headers {
            req = req.header(*name, HeaderValue::from_bytes(value).unwrap());
        }
        if let Some(Raw(ct)) = &case.content_type {
            req = req.header(header::CONTENT_TYPE, HeaderValue::from_bytes(ct).unwrap());
        }
        let body = match &case.body {
            None => Body::empty(),
            Some(BodyKind::Form(fields)) => Body::from(
                fields
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join("&"),
            ),
            Some(BodyKind::Raw(Raw(bytes))) => Body::from(bytes.clone()),
            Some(BodyKind::Huge) => Body::from("item=1&count=1&".repeat(5_000)),
        };
        req.body(body)
            .unwrap_or_else(|e| panic!("the fuzz made a request http refuses ({e}): {case:?}"))
    }

    async fn snapshot(&self) -> Snapshot {
        let mut raw = self.raw.clone();
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1_000)
                .query_async(&mut raw)
                .await
                .unwrap();
            keys.extend(batch.into_iter().filter(|k| !bookkeeping(k)));
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        let mut types = redis::pipe();
        for k in &keys {
            types.cmd("TYPE").arg(k);
        }
        let types: Vec<String> = if keys.is_empty() {
            Vec::new()
        } else {
            types.query_async(&mut raw).await.unwrap()
        };
        let of = |wanted: &str| -> Vec<&String> {
            keys.iter()
                .zip(&types)
                .filter(|(_, t)| *t == wanted)
                .map(|(k, _)| k)
                .collect()
        };
        let mut redis = BTreeMap::new();
        macro_rules! dump {
            ($type:literal, $variant:expr, |$pipe:ident, $key:ident| $cmd:expr) => {
                let group = of($type);
                if !group.is_empty() {
                    let mut $pipe = redis::pipe();
                    for $key in &group {
                        $cmd;
                    }
                    let values: Vec<_> = $pipe.query_async(&mut raw).await.unwrap();
                    for (k, v) in group.into_iter().zip(values) {
                        redis.insert(k.clone(), $variant(v));
                    }
                }
            };
        }
        dump!(
            "string",
            |v: Option<Vec<u8>>| Stored::String(v.map(Raw)),
            |p, k| p.get(k)
        );
        dump!("hash", Stored::Hash, |p, k| p.hgetall(k));
        dump!("zset", Stored::ZSet, |p, k| p
            .cmd("ZRANGE")
            .arg(k)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES"));
        dump!("set", Stored::Set, |p, k| p.smembers(k));
        dump!("list", Stored::List, |p, k| p.lrange(k, 0, -1));
        for (k, t) in keys.iter().zip(&types) {
            if !["string", "hash", "zset", "set", "list", "none"].contains(&t.as_str()) {
                redis.insert(k.clone(), Stored::Other(t.clone()));
            }
        }
        let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
            .fetch_one(self.app.db.pool())
            .await
            .unwrap();
        Snapshot { redis, orders }
    }

    /// One case: the request, and the invariants on its answer.
    async fn check(&self, case: &Case) -> Result<(), TestCaseError> {
        self.refresh_tokens(case).await;
        let before = self.snapshot().await;
        let (status, body) = self.send(self.request(case)).await;
        *self
            .statuses
            .borrow_mut()
            .entry((case.target, status))
            .or_default() += 1;
        let body = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
        if status >= 500 {
            return Err(TestCaseError::fail(format!("answered {status}: {body}")));
        }
        if (400..500).contains(&status) {
            let after = self.snapshot().await;
            if before != after {
                return Err(TestCaseError::fail(format!(
                    "answered {status} but changed state:\n{}\nbody: {body}",
                    diff(&before, &after)
                )));
            }
        }
        Ok(())
    }
}

fn diff(before: &Snapshot, after: &Snapshot) -> String {
    let mut out = Vec::new();
    if before.orders != after.orders {
        out.push(format!("orders: {} -> {}", before.orders, after.orders));
    }
    let keys: BTreeSet<&String> = before.redis.keys().chain(after.redis.keys()).collect();
    for k in keys {
        let (b, a) = (before.redis.get(k), after.redis.get(k));
        if b != a {
            let show = |v: Option<&Stored>| {
                let s = format!("{v:?}");
                s.chars().take(300).collect::<String>()
            };
            out.push(format!("{k}: {} -> {}", show(b), show(a)));
        }
    }
    out.join("\n")
}

#[test]
fn arbitrary_requests_never_fail_the_server_and_a_4xx_changes_nothing() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let shop = rt.block_on(Shop::start());
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        // Shrinking replays requests against the same, changing shop: bound it.
        max_shrink_time: 60_000,
        ..Config::default()
    });
    let started = Instant::now();
    let result = runner.run(&case(), |case| rt.block_on(shop.check(&case)));
    let took = started.elapsed();
    let statuses = shop.statuses.borrow().clone();
    let class = |c: u16| -> u32 {
        statuses
            .iter()
            .filter(|((_, s), _)| *s / 100 == c)
            .map(|(_, n)| n)
            .sum()
    };
    eprintln!(
        "fuzz: {} requests in {:.1} s: {} 2xx, {} 3xx, {} 4xx, {} 5xx",
        statuses.values().sum::<u32>(),
        took.as_secs_f64(),
        class(2),
        class(3),
        class(4),
        class(5),
    );
    let mut by_target: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((target, status), n) in &statuses {
        by_target
            .entry(target)
            .or_default()
            .push(format!("{status}: {n}"));
    }
    for (target, counts) in by_target {
        eprintln!("  {target:<12} {}", counts.join(", "));
    }
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generators reach every kind of answer, or the fuzz tests less than it says.
    for c in [2, 3, 4] {
        assert!(class(c) > 0, "no {c}xx answer: {statuses:?}");
    }
}
