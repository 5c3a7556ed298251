//! `shop load` against a test server: a short smoke run whose report must be whole.

use crate::e2e::{Binary, seeded, stop};
use crate::shop;

#[tokio::test]
async fn two_seconds_of_load_give_a_well_formed_report() {
    let test_shop = seeded(200).await;
    let (server, addr, metrics) = crate::e2e::serve_with_metrics(test_shop.shop(), &[]);
    let cwd = &test_shop.cwd;

    let json = cwd.path().join("report.json");
    let svg = cwd.path().join("latency.svg");
    let out = shop()
        .args([
            "load",
            "--target",
            &addr,
            "--metrics",
            &metrics,
            "--duration",
            "2",
            "--connections",
            "4",
        ])
        .args(["--items", "200", "--shoppers", "50", "--quiet", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "req/s",
        "HTTP errors",
        "0 connection failures",
        "p99",
        "statuses",
        "page cache",
    ] {
        assert!(stdout.contains(part), "{part}: {stdout}");
    }

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let requests = report["requests"].as_u64().unwrap();
    assert!(requests > 0, "{report}");
    assert_eq!(report["connection_failures"], 0, "{report}");
    let statuses: u64 = report["statuses"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(statuses, requests);
    let http_errors: u64 = report["statuses"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(status, _)| status.parse::<u16>().unwrap() >= 400)
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    assert_eq!(report["http_errors"], http_errors, "{report}");
    assert!(
        report["statuses"].get("500").is_none(),
        "no server errors: {report}"
    );
    let l = &report["latency_us"];
    let (p50, p99, max) = (
        l["p50"].as_u64().unwrap(),
        l["p99"].as_u64().unwrap(),
        l["max"].as_u64().unwrap(),
    );
    assert!(0 < p50 && p50 <= p99 && p99 <= max, "{l}");
    let cache = &report["cache"];
    let lookups = ["hits", "misses", "bypasses"]
        .iter()
        .map(|k| cache[k].as_u64().unwrap())
        .sum::<u64>();
    assert!(lookups > 0, "the page cache saw the item views: {cache}");
    assert!(!report["timeline"].as_array().unwrap().is_empty());
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline"),
        "{svg}"
    );

    assert!(stop(server).success());
}

/// The flash scenario on both deciders: every buyer answered, exactly the stock
/// ordered, no 5xx, and the JSON says so.
#[tokio::test]
async fn the_flash_scenario_sells_exactly_the_stock_on_both_deciders() {
    for decider in ["redis", "database"] {
        let test_shop = seeded(20).await;
        let (server, addr) = test_shop.serve(&["--flash-decider", decider]);
        let json = test_shop.cwd.path().join("flash.json");
        let out = test_shop
            .shop()
            .args(["load", "--scenario", "flash", "--target", &addr])
            .args(["--buyers", "300", "--stock", "25", "--connections", "16"])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{decider}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("buys/s"), "{stdout}");
        assert!(
            stdout.contains("25 units ordered for a stock of 25 (0 oversold)"),
            "{decider}: {stdout}"
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let outcomes = &report["report"]["outcomes"];
        assert_eq!(outcomes["bought"], 25, "{decider}: {report}");
        assert_eq!(outcomes["sold_out"], 275, "{decider}: {report}");
        assert_eq!(report["report"]["connection_failures"], 0);
        assert_eq!(
            report["report"]["distinct_orders"], 25,
            "each unit sold once"
        );
        assert_eq!(report["check"]["ok"], true);
        // The sale ended with the run: item 1 is not left on sale at $1.
        let row = test_shop
            .db
            .inventory_row(shop_cache::domain::ItemId::new(1).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(
            row.sale_end.is_some_and(|end| end <= shop_db::unix_now()),
            "{decider}: {row:?}"
        );
        // A second run on the same shop: a new sale, the same buyers, again
        // exact: 30 of them, among the first run's winners, buy all 25 units.
        let again = test_shop
            .shop()
            .args(["load", "--scenario", "flash", "--target", &addr])
            .args(["--buyers", "30", "--stock", "25", "--connections", "16"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&again.stdout);
        assert!(again.status.success(), "{decider}: {said}");
        assert!(
            said.contains("25 units ordered for a stock of 25 (0 oversold)"),
            "{decider}: {said}"
        );
        assert!(stop(server).success());
    }
}

#[tokio::test]
async fn listing_and_search_loads_ask_only_for_pages_that_exist() {
    let test_shop = seeded(300).await;
    // The load generator is one address: its searches and listings are all uncached.
    let (server, addr) = test_shop.serve(&[
        "--uncached-per-address",
        "10000000",
        "--counted-views-per-address",
        "10000000",
    ]);
    // The address as a browser's address bar shows it is taken too.
    let url = format!("http://{addr}/");
    for (only, target) in [("browse", &addr), ("search", &url)] {
        let json = test_shop.cwd.path().join(format!("{only}.json"));
        crate::e2e::succeed(
            shop()
                .args(["load", "--target", target, "--duration", "1"])
                .args(["--connections", "2", "--items", "300", "--quiet"])
                .args(["--only", only, "--json"])
                .arg(&json),
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let statuses = report["statuses"].as_object().unwrap();
        assert!(report["requests"].as_u64().unwrap() > 0, "{only}: {report}");
        assert_eq!(
            statuses.keys().collect::<Vec<_>>(),
            ["200"],
            "{only}: every request a page: {report}"
        );
    }
    assert!(stop(server).success());
}

/// The shop's count of answered requests to `route` with status 200, from its
/// `/metrics`.
fn served(metrics: &str, route: &str) -> u64 {
    let body = crate::e2e::request(metrics, "GET", "/metrics", None, None).body;
    let line = format!("shop_http_requests_total{{route=\"{route}\",status=\"200\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn a_page_view_load_asks_for_each_page_as_a_browser_does_and_counts_page_views() {
    let test_shop = seeded(200).await;
    // The load generator is one address: its first views of each page are uncached.
    let (server, addr, metrics) = crate::e2e::serve_with_metrics(
        test_shop.shop(),
        &[
            "--uncached-per-address",
            "10000000",
            "--counted-views-per-address",
            "10000000",
        ],
    );
    let me_before = served(&metrics, "/api/me");
    let json = test_shop.cwd.path().join("pageviews.json");
    let out = crate::e2e::succeed(
        shop()
            .args(["load", "--target", &addr, "--metrics", &metrics])
            .args(["--duration", "2", "--connections", "4", "--items", "200"])
            .args([
                "--shoppers",
                "20",
                "--quiet",
                "--only",
                "pageviews",
                "--json",
            ])
            .arg(&json),
    );
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("page views"), "{out}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let views = report["page_views"].as_u64().unwrap();
    assert!(views > 0, "{report}");
    // Every page view is two requests (the item page carries its insights), every
    // one answered 200.
    assert_eq!(report["requests"].as_u64().unwrap(), 2 * views, "{report}");
    let statuses = report["statuses"].as_object().unwrap();
    assert_eq!(statuses.keys().collect::<Vec<_>>(), ["200"], "{report}");
    let parts = report["parts"].as_object().unwrap();
    assert_eq!(parts.keys().collect::<Vec<_>>(), ["html", "me"], "{report}");
    for (part, latency) in parts {
        assert!(latency["p99"].as_u64().unwrap() > 0, "{part}: {report}");
    }
    let rate = report["page_views_per_second"].as_f64().unwrap();
    let secs = report["duration_s"].as_f64().unwrap();
    assert!((rate * secs - views as f64).abs() < 1.0, "{report}");
    // The shop answered an `/api/me` for every page view, with the session's
    // cookie: its shoppers' sessions exist (at most one each).
    assert_eq!(served(&metrics, "/api/me") - me_before, views);
    assert!(stop(server).success());
}

/// The load generator asks for `/api/me` as the pages' script does.
#[test]
fn the_load_generators_per_user_call_is_the_pages() {
    assert_eq!(
        shop_load::ME,
        format!(
            "{}?recent={}",
            shop_web::me::PATH,
            shop_web::me::PAGE_RECENT
        )
    );
}

/// A target the load generator cannot drive is refused before anything runs, with
/// what to give instead: not retried as connection failures for the whole run.
#[test]
fn a_target_that_is_no_address_is_refused_at_once() {
    for (target, says) in [
        ("https://127.0.0.1:8443", "plain HTTP"),
        ("http://127.0.0.1:8080/items/42", "only the address"),
        ("127.0.0.1", "a port is required"),
    ] {
        let started = std::time::Instant::now();
        let out = shop()
            .args(["load", "--target", target, "--duration", "30", "--quiet"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{target}: {stderr}");
        assert!(
            stderr.contains("--target") && stderr.contains(says),
            "{target}: {stderr}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{target}: refused, not run"
        );
    }
}
