use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use shop_testapp::TestApp;

use crate::e2e::Binary;
use crate::shop;

fn terminate(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "could not signal the shop process");
}

fn wait_with_deadline(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("shop did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn work_runs_the_cleaner_and_the_rescaler_and_stops_on_sigterm() {
    let app = TestApp::start().await;
    let mut raw = app.redis.conn().await;
    // Seen in the last minute (older would be past the idle lifetime).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for i in 0..50 {
        let token = format!("tok{i:019}");
        let _: () = raw.zadd("s:recent:", &token, now - 60 + i).await.unwrap();
        let _: () = raw.hset(format!("s:cart:{token}"), "1", 1).await.unwrap();
    }
    let views: Vec<(f64, u64)> = (1..=30).map(|i| (-(i as f64) * 2.0, i)).collect();
    let _: () = raw.zadd_multiple("s:viewed:", &views).await.unwrap();

    let child = app
        .shop()
        .arg("work")
        .env("SHOP_KEY_PREFIX", "s:")
        .env("SHOP_SESSION_CAP", "10")
        .env("SHOP_CLEANER_BATCH", "7")
        .env("SHOP_RESCALE_KEEP", "20")
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n: u64 = raw.zcard("s:recent:").await.unwrap();
        if n == 10 {
            break;
        }
        assert!(Instant::now() < deadline, "still {n} sessions");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept: Vec<String> = raw.zrange("s:recent:", 0, -1).await.unwrap();
    assert_eq!(
        kept.first().unwrap(),
        &format!("tok{:019}", 40),
        "oldest went"
    );
    let carts: Vec<String> = raw.keys("s:cart:*").await.unwrap();
    assert_eq!(carts.len(), 10);
    // The rescaler ran too: the 20 most viewed kept, counts halved.
    let deadline = Instant::now() + Duration::from_secs(15);
    while raw.zcard::<_, u64>("s:viewed:").await.unwrap() != 20 {
        let all: Vec<(String, f64)> = raw.zrange_withscores("s:viewed:", 0, -1).await.unwrap();
        assert!(Instant::now() < deadline, "no rescale: {all:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let top: Option<f64> = raw.zscore("s:viewed:", 30).await.unwrap();
    assert_eq!(top, Some(-30.0));

    terminate(&child);
    let out = wait_with_deadline(child, Duration::from_secs(5));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert!(stderr.contains("stopped"), "{stderr}");
}

#[test]
fn unreachable_redis_is_a_clear_error_not_a_panic() {
    let out = shop()
        .arg("work")
        .env("REDIS_URL", "unix:///nonexistent/shop-test.sock")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach Redis"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_password_in_the_redis_url_is_not_printed() {
    let out = shop()
        .arg("work")
        .env("REDIS_URL", "redis://user:hunter2@127.0.0.1:1/0")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success());
    assert!(all.contains("redis://user:***@127.0.0.1:1/0"), "{all}");
    assert!(!all.contains("hunter2"), "{all}");
}

#[test]
fn bad_settings_stop_the_start_with_the_setting_named() {
    let out = shop()
        .arg("work")
        .env("SHOP_CLEANER_BATCH", "100000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--cleaner-batch"), "{stderr}");
}
