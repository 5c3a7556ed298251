//! The outermost layers ([`shop_web::http_limits`]): a panicking handler, a slow
//! handler, an oversized body, and what the request trace writes to the log.
//! Driven without a socket; the real router runs over its own redis-server.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::routing::get;
use shop_testkit::TestRedis;
use shop_web::http_limits::{self, HttpLimits};

use shop_testapp::{PASSWORD, RedisWaits, TestApp, cookie_of, form_post, json, send, text};

const PANIC_TEXT: &str = "the secret detail of a bug";
const CAUSE_TEXT: &str = "what failed below the web tier";
const INSIDE_TEXT: &str = "a store went away; going on without it";

fn get_json(uri: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::ACCEPT, "application/json")
        .body(Body::empty())
        .unwrap()
}

/// A router of test handlers behind [`http_limits::harden`].
fn hardened(limits: &HttpLimits) -> Router {
    let routes = Router::new()
        .route(
            "/boom",
            get(|| async {
                panic!("{PANIC_TEXT}");
                #[allow(unreachable_code)]
                ""
            }),
        )
        .route(
            "/warns",
            get(|| async {
                tracing::warn!("{INSIDE_TEXT}");
                "served all the same"
            }),
        )
        .route(
            "/busy",
            get(|| async {
                shop_web::error::WebError::busy("busy", "come back", Duration::from_secs(7))
            }),
        )
        .route(
            "/broken",
            get(|| async {
                shop_web::error::WebError::internal().caused_by(shop_web::error::Cause::new(
                    tracing::Level::ERROR,
                    CAUSE_TEXT,
                ))
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            })
            // A slow handler of a request with a body it never reads.
            .post(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        )
        .route(
            "/upload",
            axum::routing::post(|body: String| async move { body.len().to_string() }),
        );
    http_limits::harden(routes, limits)
}

#[tokio::test]
async fn a_panicking_handler_answers_the_generic_500_and_never_the_panic_text() {
    let app = hardened(&HttpLimits::default());

    let resp = send(&app, get_json("/boom")).await;
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = json(resp).await;
    assert_eq!(
        body,
        serde_json::json!({"error": "internal", "message": "something went wrong on our side"})
    );

    // A person gets the shop's error page, with the same generic message.
    let resp = send(&app, Request::get("/boom").body(Body::empty()).unwrap()).await;
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let page = text(resp).await;
    assert!(page.contains("something went wrong on our side"), "{page}");
    assert!(!page.contains(PANIC_TEXT), "{page}");

    // The router (and so the connection) lives on.
    let resp = send(&app, get_json("/no-such-route")).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

/// A 503 of the shop's own keeps what it says (`Retry-After`), for `HEAD` too,
/// whose answer is empty by the time the outer layers see it: it is not taken
/// for the timeout's own empty answer.
#[tokio::test]
async fn a_busy_answer_keeps_its_retry_after_for_get_and_head() {
    let app = hardened(&HttpLimits::default());
    for method in [Method::GET, Method::HEAD] {
        let req = Request::builder()
            .method(method.clone())
            .uri("/busy")
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .unwrap();
        let resp = send(&app, req).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "{method}");
        assert_eq!(
            resp.headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_owned()),
            Some("7".to_owned()),
            "{method}"
        );
        if method == Method::GET {
            assert_eq!(json(resp).await["error"], "busy");
        }
    }
}

#[tokio::test]
async fn a_slow_handler_answers_the_timeout_status_promptly() {
    let limits = HttpLimits {
        request_timeout: Duration::from_millis(200),
        ..HttpLimits::default()
    };
    let app = hardened(&limits);
    let started = Instant::now();
    let resp = send(&app, get_json("/slow")).await;
    let took = started.elapsed();
    assert_eq!(resp.status(), http_limits::TIMEOUT_STATUS);
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "answered after {took:?}"
    );
    let body = json(resp).await;
    assert_eq!(body["error"], "timeout", "{body}");
}

/// A body that sends its first bytes, then nothing, never ending (a client
/// trickling an upload, or one that stopped sending).
fn trickling_body() -> Body {
    let first = futures::stream::once(async {
        Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"title=a"))
    });
    Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending()))
}

/// A body that stops arriving is the client's doing: 408 (not the shop's 503),
/// the connection closed, no warning in the log, and one `INFO` line for many. A handler that was slow with
/// a body it never read still answers the timeout status, a warning; a body
/// that arrives is answered.
#[tokio::test]
async fn a_body_that_stops_arriving_answers_408_and_a_slow_handler_still_503() {
    let (capture, _guards) = capture_logs(tracing::Level::INFO);
    let limits = HttpLimits {
        request_timeout: Duration::from_millis(200),
        ..HttpLimits::default()
    };
    let app = hardened(&limits);
    let post = |uri: &str, body: Body| {
        Request::post(uri)
            .header(header::ACCEPT, "application/json")
            .header(header::CONTENT_TYPE, "text/plain")
            .body(body)
            .unwrap()
    };

    let resp = send(&app, post("/upload", trickling_body())).await;
    assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(resp.headers()[header::CONNECTION], "close");
    assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-store");
    assert_eq!(json(resp).await["error"], "request_timeout");
    // A form of a page: the error page, the connection closed all the same.
    let form = Request::post("/upload")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(trickling_body())
        .unwrap();
    let resp = send(&app, form).await;
    assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(resp.headers()[header::CONNECTION], "close");
    assert!(text(resp).await.contains("did not arrive in time"));

    // More of them (an attack sends hundreds a second): answered the same,
    // logged once (the first above) until a minute has passed.
    let more = (0..5).map(|_| send(&app, post("/upload", trickling_body())));
    for resp in futures::future::join_all(more).await {
        assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    }

    let resp = send(&app, post("/slow", trickling_body())).await;
    assert_eq!(resp.status(), http_limits::TIMEOUT_STATUS);
    assert_eq!(json(resp).await["error"], "timeout");

    let resp = send(&app, post("/upload", Body::from("title=whole"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "11");

    let log = capture.text();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "only the slow handler warns:\n{log}");
    assert!(warnings[0].contains("/slow"), "{log}");
    let slow_bodies: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("INFO") && l.contains("/upload") && l.contains("408"))
        .collect();
    assert_eq!(
        slow_bodies.len(),
        1,
        "the first of seven 408s is logged at INFO, the rest not:\n{log}"
    );
    assert!(slow_bodies[0].contains("too slowly (1 so far;"), "{log}");
}

/// The real router over its own Redis and SQLite file.
async fn shop() -> TestApp {
    TestApp::builder().waits(RedisWaits::Shop).start().await
}

/// Every key in Redis with its serialised value, to compare before and after.
async fn redis_snapshot(redis: &TestRedis) -> Vec<(String, Vec<u8>)> {
    let mut conn = redis
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let mut snapshot = Vec::new();
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        snapshot.push((key, dump));
    }
    snapshot
}

fn cart_post(cookie: &str, body: Body, length: Option<usize>) -> Request<Body> {
    let mut req = form_post("/cart", Some(cookie), true);
    if let Some(length) = length {
        req = req.header(header::CONTENT_LENGTH, length);
    }
    req.body(body).unwrap()
}

#[tokio::test]
async fn a_one_mebibyte_cart_post_is_refused_and_changes_nothing() {
    let shop = shop().await;
    let cookie = cookie_of(&shop.send(get_json("/api/me")).await).unwrap();
    let mut form = String::from("item=5&count=2&pad=");
    form.push_str(&"x".repeat(1024 * 1024));

    // Declared size: refused before any handler, session lookup or Redis call.
    let before = redis_snapshot(&shop.redis).await;
    let resp = shop
        .send(cart_post(
            &cookie,
            Body::from(form.clone()),
            Some(form.len()),
        ))
        .await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = json(resp).await;
    assert_eq!(body["error"], "too_large", "{body}");
    assert_eq!(
        redis_snapshot(&shop.redis).await,
        before,
        "Redis is untouched"
    );

    // Undeclared size (chunked): cut short while the form is read; no cart line.
    let chunks: Vec<Result<String, std::io::Error>> = form
        .as_bytes()
        .chunks(16 * 1024)
        .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
        .collect();
    let resp = shop
        .send(cart_post(
            &cookie,
            Body::from_stream(futures::stream::iter(chunks)),
            None,
        ))
        .await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let me = shop.me(&cookie).await;
    assert_eq!(me["cart"]["lines"], serde_json::json!([]), "{me}");

    // A normal form still works.
    let small = "item=5&count=2";
    let resp = shop
        .send(cart_post(&cookie, Body::from(small), Some(small.len())))
        .await;
    assert_eq!(resp.status(), StatusCode::OK, "{}", text(resp).await);
}

/// A log writer into a shared buffer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Logs of this test's thread at `level` and above, into a buffer, while the
/// guards live.
fn capture_logs(
    level: tracing::Level,
) -> (
    Capture,
    (tracing::subscriber::DefaultGuard, tracing::Dispatch),
) {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .map_event_format(shop_web::request_log::NamedRequests)
        .finish();
    // The test's runtime is single-threaded: every task logs through this default.
    let default = tracing::subscriber::set_default(subscriber);
    // `tracing` caches per call site whether any subscriber wants it. With just
    // one subscriber registered it asks the default of whichever thread reaches
    // the call site first: a test running in parallel (no subscriber) would switch
    // the request log's call sites off for good. With a second one registered it
    // asks every registered subscriber, and this test's thread gets its events.
    let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    (capture, (default, second))
}

/// At the default level (`info`) an error answer's cause (a panic's text too)
/// is logged once, at its level, saying which request it was and how long it
/// took; any other answer of 5xx is a warning with the same; other answers are
/// not logged.
#[tokio::test]
async fn a_failed_request_is_a_warning_with_its_path_status_and_latency() {
    let (capture, _guards) = capture_logs(tracing::Level::INFO);
    let app = hardened(&HttpLimits::default());
    for (uri, status) in [
        (
            "/boom?coupon=query-secret",
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        ("/busy", StatusCode::SERVICE_UNAVAILABLE),
        ("/no-such-route", StatusCode::NOT_FOUND),
        ("/broken", StatusCode::INTERNAL_SERVER_ERROR),
    ] {
        assert_eq!(send(&app, get_json(uri)).await.status(), status, "{uri}");
    }
    let log = capture.text();
    // One line for each failure, at its level, with the request's fields: a
    // cause's own message, or `request failed` for an answer that has none.
    for (path, status, level, message) in [
        ("/boom", 500, " ERROR ", PANIC_TEXT),
        ("/busy", 503, " WARN ", "request failed"),
        ("/broken", 500, " ERROR ", CAUSE_TEXT),
    ] {
        let lines: Vec<&str> = log
            .lines()
            .filter(|line| line.contains(&format!("path={path} ")))
            .collect();
        assert_eq!(lines.len(), 1, "one line for {path}:\n{log}");
        for expected in [
            level.to_owned(),
            message.to_owned(),
            "method=GET".to_owned(),
            format!("status={status} "),
            "latency_us=".to_owned(),
        ] {
            assert!(lines[0].contains(&expected), "no {expected:?} in {log}");
        }
    }
    assert!(!log.contains("no-such-route"), "{log}");
    assert!(
        !log.contains("query-secret"),
        "a query string is in the log"
    );
}

/// While the session store is down its failures are not a warning each: the
/// outage is logged as it begins (the breaker's line, the first touch that
/// failed), and the writes it refuses answer 503 without a line of their own
/// at `info` (before, every refused cart write was a `request failed`), nor
/// does `/healthz`'s 503 (before, one at every health check).
#[tokio::test]
async fn a_store_outage_is_not_a_warning_per_request() {
    let mut shop = shop().await;
    let guest = cookie_of(&shop.get("/api/me", None).await).unwrap();
    let (capture, _guards) = capture_logs(tracing::Level::INFO);
    shop.redis.kill();
    let began = Instant::now();
    for _ in 0..20 {
        let resp = shop
            .post("/cart", Some(&guest), "item=3&count=1", false)
            .await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    // A balancer's health checks are answered 503 (the answer is the report).
    for _ in 0..3 {
        let resp = shop.get("/healthz", None).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    // The breaker's line and the first touch's; on a slow machine also a
    // failed probe's, one every 250 ms.
    let most = 3 + began.elapsed().as_millis() as usize / 250;
    let log = capture.text();
    let lines = log.lines().filter(|l| l.contains("path=/cart")).count();
    assert!(
        (1..=most).contains(&lines),
        "{lines} lines for 20 refused cart writes:\n{log}"
    );
    assert!(!log.contains("request failed"), "{log}");
    assert!(!log.contains("path=/healthz"), "{log}");
}

/// What is logged while a request runs says which request it was: at `info`
/// (no span per request) the line ends with its method and path; at `debug`
/// the request's span says it, once.
#[tokio::test]
async fn a_line_logged_while_a_request_runs_names_the_request() {
    for level in [tracing::Level::INFO, tracing::Level::DEBUG] {
        let (capture, _guards) = capture_logs(level);
        let app = hardened(&HttpLimits::default());
        let resp = send(&app, get_json("/warns?coupon=query-secret")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let log = capture.text();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(INSIDE_TEXT)).collect();
        assert_eq!(lines.len(), 1, "{level}: {log}");
        let line = lines[0];
        assert!(line.contains(" WARN "), "{line}");
        match level {
            tracing::Level::INFO => assert!(
                line.ends_with(&format!("{INSIDE_TEXT} method=GET path=/warns")),
                "{line}"
            ),
            _ => {
                assert!(line.contains("request{method=GET path=/warns}"), "{line}");
                assert_eq!(line.matches("path=/warns").count(), 1, "{line}");
            }
        }
        assert!(
            !log.contains("query-secret"),
            "a query string is in the log"
        );
    }
    // Outside a request, a line is as it was.
    let (capture, _guards) = capture_logs(tracing::Level::INFO);
    tracing::warn!("{INSIDE_TEXT}");
    let log = capture.text();
    assert!(log.trim_end().ends_with(INSIDE_TEXT), "{log}");
    assert_eq!(log.lines().count(), 1, "{log}");
}

#[tokio::test]
async fn the_request_trace_has_the_path_and_status_but_never_a_session_token() {
    let (capture, _guards) = capture_logs(tracing::Level::TRACE);

    let shop = shop().await;
    shop.db
        .create_user("dora", PASSWORD)
        .await
        .unwrap()
        .unwrap();
    let guest = cookie_of(&shop.send(get_json("/api/me")).await).unwrap();
    let mut requests = vec![
        Request::get("/cart?coupon=query-secret"),
        Request::get("/items/3"),
        Request::get("/api/me"),
        Request::get("/no-such-page"),
    ];
    let form = "item=5&count=1";
    requests.push(
        Request::post("/cart")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::CONTENT_LENGTH, form.len()),
    );
    for req in requests {
        let body = if req.method_ref() == Some(&Method::POST) {
            form
        } else {
            ""
        };
        let req = req
            .header(header::COOKIE, &guest)
            .body(Body::from(body))
            .unwrap();
        shop.send(req).await;
    }
    let login = format!("name=dora&password={PASSWORD}");
    let resp = shop.post("/login", Some(&guest), &login, false).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let user = cookie_of(&resp).expect("login issues a new token");
    shop.get("/account", Some(&user)).await;

    let log = capture.text();
    for cookie in [&guest, &user] {
        let token = cookie.strip_prefix("shop_session=").unwrap();
        assert!(token.len() >= 16, "{cookie}");
        assert!(
            !log.contains(token),
            "a session token is in the log:\n{log}"
        );
    }
    for expected in [
        "path=/cart",
        "path=/items/3",
        "path=/account",
        "method=POST",
        "status=200",
        "status=303",
        "status=404",
        "latency_us=",
    ] {
        assert!(log.contains(expected), "no {expected:?} in the log:\n{log}");
    }
    assert!(
        !log.contains("query-secret"),
        "a query string is in the log"
    );
}

/// The security headers of every answer: the CSP (no framing), no sniffing, no
/// framing for older browsers, no `Referer` to other sites.
fn assert_secured(resp: &axum::response::Response, what: &str) {
    let h = resp.headers();
    let csp = h
        .get(header::CONTENT_SECURITY_POLICY)
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"))
        .to_str()
        .unwrap();
    for part in [
        "default-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "base-uri 'none'",
    ] {
        assert!(csp.contains(part), "{what}: {csp}");
    }
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
    assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{what}");
    assert_eq!(h[header::REFERRER_POLICY], "same-origin", "{what}");
}

#[tokio::test]
async fn every_answer_carries_the_security_headers_and_no_cached_page_stores_them() {
    // The layers alone: a panic and a timeout answer too.
    let app = hardened(&HttpLimits {
        request_timeout: Duration::from_millis(100),
        ..HttpLimits::default()
    });
    assert_secured(&send(&app, get_json("/boom")).await, "a panic");
    assert_secured(&send(&app, get_json("/slow")).await, "a timeout");

    // The shop: pages, a cached page served from Redis, errors, files, probes.
    let shop = shop().await;
    let mut raw = shop.redis.conn().await;
    let _: () = redis::AsyncCommands::zadd(&mut raw, "viewed:", 3, -100)
        .await
        .unwrap();
    let guest = shop.visitor().await;
    for (uri, cookie) in [
        ("/", None),
        ("/items/3", None),
        ("/items/3", Some(guest.as_str())),
        ("/items/999999", None),
        ("/items?after=abc", None),
        ("/no-such-page", None),
        ("/static/shop.js", None),
        ("/healthz", None),
        ("/api/me", Some(guest.as_str())),
        ("/flash", None),
    ] {
        let resp = shop.get(uri, cookie).await;
        assert_secured(&resp, uri);
    }
    let hit = shop.get("/items/3", None).await;
    assert_eq!(hit.headers()["x-cache"], "HIT");
    assert_secured(&hit, "a cached page");
    // Added as the page leaves, never stored with it.
    for key in shop
        .redis
        .all_keys()
        .await
        .into_iter()
        .filter(|k| k.starts_with("cache:"))
    {
        let stored: Vec<u8> = redis::AsyncCommands::get(&mut raw, &key).await.unwrap();
        let text = String::from_utf8_lossy(&stored).to_lowercase();
        assert!(!text.contains("content-security-policy"), "{key}");
    }
    let resp = shop
        .post("/cart", Some(&guest), "item=3&count=1", false)
        .await;
    assert_secured(&resp, "a form post");
}

/// axum's own refusals, below the shop's handlers (a path that does not parse,
/// a body of another type, a method the route does not take), answer a JSON
/// client in the shop's shape, `{error, message}`, and a person with the
/// error page; a 405 keeps its `Allow`.
#[tokio::test]
async fn refusals_below_the_handlers_answer_in_the_shops_shape() {
    let app = shop().await;
    let cookie = app.visitor().await;
    let is_json = |resp: &axum::response::Response| {
        resp.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    };

    // A path segment that is not UTF-8.
    let resp = app
        .post("/api/me/sessions/%FF/end", Some(&cookie), "", true)
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(is_json(&resp));
    let body = json(resp).await;
    assert_eq!(body["error"], "bad_request", "{body}");
    assert!(!body["message"].as_str().unwrap().is_empty(), "{body}");

    // A form's route sent another type of body.
    let plain = Request::post("/cart")
        .header(header::COOKIE, &cookie)
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("item=1&quantity=1"))
        .unwrap();
    let resp = app.send(plain).await;
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(is_json(&resp));
    let body = json(resp).await;
    assert_eq!(body["error"], "unsupported_media_type", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("application/x-www-form-urlencoded"),
        "axum's own words: {body}"
    );

    // A method the route does not take.
    let delete = Request::delete("/cart")
        .header(header::COOKIE, &cookie)
        .header(header::ACCEPT, "application/json")
        .body(Body::empty())
        .unwrap();
    let resp = app.send(delete).await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(resp.headers().contains_key(header::ALLOW));
    assert!(is_json(&resp));
    assert_eq!(json(resp).await["error"], "method_not_allowed");

    // A person gets the error page, with what the answer said besides its
    // body: a new visitor's cookie, a 405's `Allow`.
    let is_html = |resp: &axum::response::Response| {
        resp.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    };
    let resp = app.get("/c/%FF", None).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(is_html(&resp));
    assert!(
        cookie_of(&resp).is_some(),
        "the visitor's new cookie is kept"
    );
    let page = text(resp).await;
    assert!(page.contains("<html"), "{page}");
    let delete = Request::delete("/cart")
        .header(header::COOKIE, &cookie)
        .body(Body::empty())
        .unwrap();
    let resp = app.send(delete).await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(is_html(&resp));
    assert!(resp.headers().contains_key(header::ALLOW));
}
