//! Peak memory of a burst of wrong-password logins: 200 checks, 20 at a time, against
//! a fresh SQLite file, then a pause. Prints the process's VmHWM (peak resident set)
//! and VmRSS from `/proc/self/status` at each stage (Linux only).
//!
//! Run it with `cargo run --release -p shop-db --example login_rss`. It is the
//! measurement behind the bounded argon2 buffers in `users.rs`: before them, every
//! verification allocated its ~19 MiB of argon2 memory on whichever blocking thread
//! ran it, and the allocator kept most of it after the burst.

use std::time::Duration;

use futures::StreamExt;
use shop_db::Db;

/// Logins tried, and how many at once (the numbers).
const LOGINS: usize = 200;
const CONCURRENCY: usize = 20;

fn memory(stage: &str) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.trim_start_matches(name).trim().to_owned())
            .unwrap_or_else(|| "?".to_owned())
    };
    println!(
        "{stage:<28} VmHWM {:>12}  VmRSS {:>12}",
        field("VmHWM:"),
        field("VmRSS:")
    );
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = Db::connect(&format!("sqlite:{}", dir.path().join("shop.db").display()))
        .await
        .expect("a SQLite database");
    db.create_user("alice", "the-right-password")
        .await
        .expect("create a user")
        .expect("a new name");
    memory("after one user");

    let started = std::time::Instant::now();
    let wrong = futures::stream::iter(0..LOGINS)
        .map(|i| {
            let db = db.clone();
            async move {
                db.check_password("alice", &format!("wrong-{i}"))
                    .await
                    .expect("a check")
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|r| futures::future::ready(r.is_none()))
        .count()
        .await;
    assert_eq!(wrong, LOGINS, "every wrong password is refused");
    println!(
        "{LOGINS} wrong-password checks, {CONCURRENCY} at a time, in {:?}",
        started.elapsed()
    );
    memory("after the burst");
    tokio::time::sleep(Duration::from_secs(2)).await;
    memory("idle 2 s later");
}
