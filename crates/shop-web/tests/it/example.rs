//! `examples/mini_shop.rs`, built by `cargo test` with the other examples, run as
//! a process against its own redis-server: the session and page-cache layers
//! mounted on routes that are not the shop's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use shop_testkit::TestRedis;

/// The example's binary, next to this test's (`target/<profile>/examples/`).
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    profile_dir.join("examples").join(name)
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 GET: the status, the headers (lowercased names) and the body.
fn get(addr: &str, path: &str, cookie: Option<&str>) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let cookie = cookie.map_or_else(String::new, |c| format!("Cookie: {c}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn the_example_app_mounts_sessions_and_the_page_cache_on_its_own_routes() {
    let binary = example("mini_shop");
    assert!(
        binary.exists(),
        "{} (built by cargo test)",
        binary.display()
    );
    let redis = TestRedis::start();
    let mut child = Command::new(&binary)
        .env("REDIS_URL", redis.url())
        .env("BIND", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _running = Running(child);
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();

    // A first visit gets a session cookie; the product has no views yet, so its
    // page is not cached; the session layer counts the view after the page.
    let (status, headers, body) = get(&addr, "/products/7", None);
    assert_eq!(status, 200);
    assert!(body.contains("Product 7"));
    assert_eq!(header(&headers, "x-cache"), Some("BYPASS"));
    let cookie = header(&headers, "set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned();
    assert!(cookie.starts_with("shop_session="), "{cookie}");
    // Once the example's view flusher has written the view (every 100 ms), it
    // ranks: rendered once and stored, then served from Redis.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let headers = loop {
        let (_, headers, _) = get(&addr, "/products/7", Some(&cookie));
        if header(&headers, "x-cache") != Some("BYPASS") {
            break headers;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the view never reached the ranking"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(header(&headers, "x-cache"), Some("MISS"));
    assert_eq!(header(&headers, "set-cookie"), None, "the cookie is kept");
    let (status, headers, body) = get(&addr, "/products/7", Some(&cookie));
    assert_eq!((status, header(&headers, "x-cache")), (200, Some("HIT")));
    assert!(body.contains("Product 7"));
    // Other routes see the session and are not cached.
    let (status, headers, body) = get(&addr, "/me", Some(&cookie));
    assert_eq!((status, body.as_str()), (200, "a guest"));
    assert_eq!(header(&headers, "x-cache"), None);
}
