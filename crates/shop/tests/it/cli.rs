//! The binary's tools and server as a user runs them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use shop_testkit::{TestDb, TestRedis};

use crate::shop;

fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = shop();
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn seed_fills_the_catalogue_once() {
    let db = TestDb::sqlite();
    let env = [("DATABASE_URL", db.url())];
    let first = stdout(&run(&["seed", "--items", "1500"], &env));
    assert!(
        first.contains("seeded 1500 new items and 3 demo users"),
        "{first}"
    );
    assert!(
        first.contains("demo logins: alice / alice-password"),
        "{first}"
    );
    let second = stdout(&run(&["seed", "--items", "1500"], &env));
    assert!(
        second.contains("seeded 0 new items and 0 demo users"),
        "{second}"
    );
    assert!(second.contains("(catalogue: 1500 items)"), "{second}");
}

#[test]
fn rows_schedule_list_and_unschedule() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    stdout(&run(&["rows", "schedule", "42", "5"], &env));
    let listed = stdout(&run(&["rows", "list"], &env));
    let line = listed
        .lines()
        .find(|l| l.trim_start().starts_with("42"))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(line.contains(" 5 "), "{line}");
    stdout(&run(&["rows", "unschedule", "42"], &env));
    let listed = stdout(&run(&["rows", "list"], &env));
    assert!(
        listed.contains("-1"),
        "delay -1 until the refresher removes it: {listed}"
    );
    let bad = run(&["rows", "schedule", "0", "5"], &env);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("item id"));
}

#[test]
fn sale_start_refuses_an_unknown_item() {
    let redis = TestRedis::start();
    let db = TestDb::sqlite();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str()), ("DATABASE_URL", db.url())];
    stdout(&run(&["seed", "--items", "10"], &env));
    let ok = stdout(&run(
        &["sale", "start", "3", "--stock", "5", "--price-cents", "100"],
        &env,
    ));
    assert!(ok.contains("item 3 is on sale"), "{ok}");
    let missing = run(
        &[
            "sale",
            "start",
            "11",
            "--stock",
            "5",
            "--price-cents",
            "100",
        ],
        &env,
    );
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("there is no item 11"));
}

/// A minimal HTTP/1.1 GET, enough to check a live server.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    (status, response)
}

fn wait_for_exit(mut child: Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("shop serve did not stop within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_answers_on_the_printed_address_and_stops_on_sigterm() {
    let redis = TestRedis::start();
    let db = TestDb::sqlite();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str()), ("DATABASE_URL", db.url())];
    stdout(&run(&["seed", "--items", "20"], &env));

    let mut cmd = shop();
    cmd.args(["serve", "--bind", "127.0.0.1:0"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let banner = lines.next().unwrap().unwrap();
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();

    let (status, body) = http_get(&addr, "/healthz");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"redis\":true") && body.contains("\"database\":true"),
        "{body}"
    );
    let (status, body) = http_get(&addr, "/flash");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Flash sale"));

    let ok = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = wait_for_exit(child, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}
