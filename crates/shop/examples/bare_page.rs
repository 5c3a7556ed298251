//! The least a server on the shop's HTTP stack (tokio, hyper, mimalloc) pays per
//! cached page: one file's bytes from memory, as a gzip page, to every request.
//! `scripts/bench-views` runs it beside the shop and nginx on the same bytes, so
//! the shop's own cost per view (its layers, its page cache, its session layer)
//! is measured against this floor rather than guessed.
//!
//!   cargo run --release -p shop --example bare_page -- hyper 127.0.0.1:8081 page.html.gz
//!
//! `hyper`: hyper's HTTP/1 connection and nothing else. `harden`: the shop's own
//! serve loop ([`shop::server::serve`]) and [`shop_web::http_limits::harden`]
//! around an axum router of the one answer: what the shop pays before its
//! routes.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::convert::Infallible;

use axum::body::Bytes;
use axum::http::{HeaderValue, header};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// The headers of the page, as nginx sends them for the same file.
const HEADERS: [(header::HeaderName, &str); 4] = [
    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
    (header::CONTENT_ENCODING, "gzip"),
    (header::VARY, "Accept-Encoding"),
    (header::CACHE_CONTROL, "public, max-age=300"),
];

fn page(body: Bytes) -> axum::http::Response<http_body_util::Full<Bytes>> {
    let mut resp = axum::http::Response::new(http_body_util::Full::new(body));
    for (name, value) in HEADERS {
        resp.headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    resp
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, addr, file] = &args[..] else {
        eprintln!("usage: bare_page hyper|harden ADDR FILE");
        return std::process::ExitCode::FAILURE;
    };
    let body = match std::fs::read(file) {
        Ok(body) => Bytes::from(body),
        Err(error) => {
            eprintln!("bare_page: {file}: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("bare_page: {addr}: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match mode.as_str() {
        "hyper" => loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors, say: not a spinning loop meanwhile.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_| {
                    let body = body.clone();
                    async move { Ok::<_, Infallible>(page(body)) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        },
        "harden" => {
            let app = axum::Router::new().fallback(move || {
                let body = body.clone();
                async move { page(body) }
            });
            let app = shop_web::http_limits::harden(app, &Default::default());
            shop::server::serve(listener, app, &Default::default(), std::future::pending()).await;
            std::process::ExitCode::SUCCESS
        }
        other => {
            eprintln!("bare_page: no mode {other}: hyper or harden");
            std::process::ExitCode::FAILURE
        }
    }
}
