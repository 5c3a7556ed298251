//! A target where nothing listens: the run ends on time, backs off between attempts
//! to connect, and reports connection failures apart from HTTP errors; and when the
//! target comes back, it is driven again within the back-off's cap. Ending early
//! (a request count) leaves no request half sent.

use std::time::{Duration, Instant};

use shop_load::{LoadConfig, Report};

/// A port on 127.0.0.1 where nothing listens (bound, then released).
fn dead_target() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr.to_string()
}

fn config(target: String, connections: usize) -> LoadConfig {
    LoadConfig {
        target,
        connections,
        items: 100,
        shoppers: 10,
        progress: false,
        // One request per ticket: a page view's parts would count too.
        mix: shop_load::Mix::views_only(),
        ..LoadConfig::default()
    }
}

/// No answer of any kind: nothing in the HTTP columns.
fn assert_no_http(report: &Report) {
    assert_eq!(report.requests, 0, "{report:?}");
    assert_eq!(report.http_errors, 0, "{report:?}");
    assert!(report.statuses.is_empty(), "{report:?}");
}

#[tokio::test]
async fn a_dead_target_is_retried_with_back_off_and_reported_as_connection_failures() {
    let connections = 4;
    let duration = Duration::from_secs(2);
    let started = Instant::now();
    let report = shop_load::run(LoadConfig {
        duration: Some(duration),
        ..config(dead_target(), connections)
    })
    .await
    .unwrap();
    let took = started.elapsed();

    assert!(
        duration <= took && took < duration + Duration::from_secs(1),
        "the run ends on time: {took:?}"
    );
    assert_no_http(&report);
    let failures = report.connection_failures;
    assert!(failures > 0, "{report:?}");
    // A retry every 10 ms would be 200 per connection in 2 s; the code without
    // back-off made ~5,000 per connection (debug build).
    let every_10ms = (duration.as_millis() / 10) as u64;
    assert!(
        failures < 2 * connections as u64 * every_10ms,
        "{failures} connection failures: no back-off"
    );
    // Doubling from 10 ms (each wait at least half its step), capped at 1 s: the
    // waits add up past 2 s after ten attempts.
    assert!(
        failures <= 11 * connections as u64,
        "{failures} connection failures: the back-off does not double"
    );

    let text = report.render();
    eprintln!("{text}");
    assert!(
        text.contains(&format!("{failures} connection failures")),
        "{text}"
    );
    assert!(text.contains("(0 HTTP errors)"), "{text}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["connection_failures"], failures, "{json}");
    assert_eq!(json["http_errors"], 0, "{json}");
    let per_second: u64 = json["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["connection_failures"].as_u64().unwrap())
        .sum();
    assert_eq!(per_second, failures, "{json}");
}

#[tokio::test]
async fn a_request_count_against_a_dead_target_ends_once_every_request_failed() {
    let started = Instant::now();
    let report = shop_load::run(LoadConfig {
        duration: None,
        requests: Some(20),
        ..config(dead_target(), 4)
    })
    .await
    .unwrap();

    // Five attempts per connection: waits of at most 10 + 20 + 40 + 80 ms between.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_no_http(&report);
    assert_eq!(report.connection_failures, 20, "{report:?}");
}

/// A minimal keep-alive HTTP/1.1 server on `listener`: 200 and an empty body to
/// every request.
async fn serve_ok(listener: tokio::net::TcpListener) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                // One request: the head, then Content-Length bytes of body.
                let request_end = loop {
                    if let Some(head) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head_text = String::from_utf8_lossy(&buf[..head]).to_lowercase();
                        let body: usize = head_text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |n| n.trim().parse().unwrap());
                        if buf.len() >= head + 4 + body {
                            break head + 4 + body;
                        }
                    }
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                buf.drain(..request_end);
                let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                if stream.write_all(ok).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[tokio::test]
async fn a_target_that_comes_back_is_driven_again_within_the_back_off_cap() {
    let target = dead_target();
    let down = Duration::from_millis(1_500);
    let server = {
        let target = target.clone();
        tokio::spawn(async move {
            tokio::time::sleep(down).await;
            serve_ok(tokio::net::TcpListener::bind(&target).await.unwrap()).await;
        })
    };
    let report = shop_load::run(LoadConfig {
        duration: Some(Duration::from_secs(4)),
        ..config(target, 2)
    })
    .await
    .unwrap();
    server.abort();

    assert!(report.connection_failures > 0, "{report:?}");
    assert!(report.requests > 0, "{report:?}");
    assert_eq!(report.statuses.get(&200), Some(&report.requests));
    assert_eq!(report.http_errors, 0, "{report:?}");
    // Back at 1.5 s; waits are capped at 1 s: answered again by the end of second 2,
    // and no failure after that (the back-off was reset by the answers).
    let first_answered = report.timeline.iter().find(|s| s.requests > 0).unwrap();
    assert!(first_answered.second <= 2, "{:?}", report.timeline);
    let last_failure = report
        .timeline
        .iter()
        .filter(|s| s.connection_failures > 0)
        .map(|s| s.second)
        .max()
        .unwrap();
    assert!(last_failure <= 2, "{:?}", report.timeline);
}

#[tokio::test]
async fn the_last_requests_are_sent_though_other_connections_ran_out_of_them() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(serve_ok(listener));
    // More connections than requests: the ones without a request end at once,
    // while the others are still connecting to send theirs.
    let report = shop_load::run(LoadConfig {
        duration: None,
        requests: Some(3),
        ..config(target, 8)
    })
    .await
    .unwrap();
    server.abort();

    assert_eq!(report.requests, 3, "{report:?}");
    assert_eq!(report.connection_failures, 0, "{report:?}");
}

#[tokio::test]
async fn a_target_that_is_no_address_fails_the_run_before_it_starts() {
    let started = Instant::now();
    let error = shop_load::run(LoadConfig {
        duration: Some(Duration::from_secs(30)),
        ..config("https://127.0.0.1:8443".to_owned(), 2)
    })
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("\"https://127.0.0.1:8443\"") && error.contains("plain HTTP"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "not run");
}
