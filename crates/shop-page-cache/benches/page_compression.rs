#![allow(missing_docs)] // criterion_group! generates undocumented items.
//! Compressing a cached item page: gzip (what the page cache stores), zstd and brotli,
//! for time and size. Run: `cargo bench -p shop-page-cache --bench page_compression`.
//! The sizes are printed once before the timings.

use std::io::{Read, Write};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const PAGE: &[u8] = include_bytes!("fixtures/item_page.html");

fn gzip(level: u32) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(PAGE).unwrap();
    e.finish().unwrap()
}

fn brotli(quality: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, quality, 22);
        w.write_all(PAGE).unwrap();
    }
    out
}

fn compression(c: &mut Criterion) {
    let stored = shop_page_cache::StoredPage::new(
        200,
        vec![("content-type".into(), b"text/html; charset=utf-8".to_vec())],
        PAGE,
    );
    println!("raw page: {} bytes", PAGE.len());
    println!(
        "stored by the shop (gzip 6 + headers): {} bytes ({:.1}% of raw)",
        stored.encode().len(),
        100.0 * stored.encode().len() as f64 / PAGE.len() as f64
    );
    for (name, size) in [
        ("gzip 1", gzip(1).len()),
        ("gzip 6", gzip(6).len()),
        ("gzip 9", gzip(9).len()),
        ("zstd 3", zstd::encode_all(PAGE, 3).unwrap().len()),
        ("zstd 19", zstd::encode_all(PAGE, 19).unwrap().len()),
        ("brotli 5", brotli(5).len()),
        ("brotli 11", brotli(11).len()),
    ] {
        println!(
            "{name:>10}: {size} bytes ({:.1}% of raw)",
            100.0 * size as f64 / PAGE.len() as f64
        );
    }

    let mut g = c.benchmark_group("compress_item_page");
    g.throughput(Throughput::Bytes(PAGE.len() as u64));
    g.bench_function("gzip_6", |b| b.iter(|| gzip(6)));
    g.bench_function("zstd_3", |b| b.iter(|| zstd::encode_all(PAGE, 3).unwrap()));
    g.bench_function("brotli_5", |b| b.iter(|| brotli(5)));
    g.finish();

    let gz = gzip(6);
    let zs = zstd::encode_all(PAGE, 3).unwrap();
    let mut g = c.benchmark_group("decompress_item_page");
    g.throughput(Throughput::Bytes(PAGE.len() as u64));
    g.bench_function("gzip", |b| {
        b.iter(|| {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut out)
                .unwrap();
            out
        })
    });
    g.bench_function("zstd", |b| b.iter(|| zstd::decode_all(&zs[..]).unwrap()));
    g.finish();
}

criterion_group!(benches, compression);
criterion_main!(benches);
