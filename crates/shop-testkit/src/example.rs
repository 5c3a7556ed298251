//! An example program of a crate (`examples/<name>.rs`, built by `cargo test` with
//! the tests) run as a process against a test's own Redis, and plain HTTP/1.1
//! requests to it: what a newcomer who copies the example would see.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

/// A running example; killed when dropped.
pub struct RunningExample {
    child: Child,
    addr: String,
}

impl RunningExample {
    /// Starts the example `name` with `REDIS_URL=redis_url` and `BIND=127.0.0.1:0`,
    /// and waits for the line `listening on http://<addr>/` it prints once bound.
    pub fn start(name: &str, redis_url: &str) -> Self {
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
        let binary = profile_dir.join("examples").join(name);
        assert!(
            binary.exists(),
            "{} is not built: a whole `cargo test` builds the examples, a run of \
             one test target (`--test it`) does not; `cargo build --examples` first",
            binary.display()
        );
        let mut child = Command::new(&binary)
            .env("REDIS_URL", redis_url)
            .env("BIND", "127.0.0.1:0")
            .stdout(Stdio::piped())
            .spawn()
            .expect("the example starts");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the example's first line");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|a| a.strip_suffix('/'))
            .map(str::to_owned);
        // Held before the address is checked, so a bad line still kills it.
        let running = Self {
            child,
            addr: addr.unwrap_or_default(),
        };
        assert!(!running.addr.is_empty(), "not an address: {line:?}");
        running
    }

    /// One request (`Connection: close`): the status, the headers (lowercased
    /// names) and the body.
    pub fn request(&self, method: &str, path: &str, cookie: Option<&str>) -> Reply {
        let addr = &self.addr;
        let mut stream = TcpStream::connect(addr).expect("the example listens");
        let cookie = cookie.map_or_else(String::new, |c| format!("Cookie: {c}\r\n"));
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Content-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
        .expect("request sent");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).expect("a reply");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
            .collect();
        Reply {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    /// A `GET`.
    pub fn get(&self, path: &str, cookie: Option<&str>) -> Reply {
        self.request("GET", path, cookie)
    }
}

impl Drop for RunningExample {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An example's answer.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The headers, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (not chunked: the examples send known lengths).
    pub body: String,
}

impl Reply {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}
