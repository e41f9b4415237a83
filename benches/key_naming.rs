//! Bucket key building and escaping (`RateLimiter::named_bucket_key`): plain keys, keys with
//! braces (escaped so they cannot leave the hash tag) and 1 kB keys (digested).
//!
//! `cargo bench -p redis-ratelimit-benches --bench key_naming`;
//! results in `docs/benchmarks.md`.

#![allow(clippy::unwrap_used, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use redis_ratelimit::RateLimiter;
use std::hint::black_box;

const NAME: &str = "orders_service::handlers::list_orders";

fn key_naming(c: &mut Criterion) {
    let limiter = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(RateLimiter::builder().memory().prefix("svc").build())
        .unwrap();
    let cases = [
        ("plain", "user:000000012345".to_owned()),
        ("braces", "{user}:{000000012345}%".to_owned()),
        ("1kB", "k".repeat(1024)),
        ("1kB-braces", "{k}".repeat(1024 / 3)),
    ];
    let mut group = c.benchmark_group("named_bucket_key");
    for (label, key) in &cases {
        group.throughput(Throughput::Bytes(key.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(label), key, |b, key| {
            b.iter(|| limiter.named_bucket_key(black_box(NAME), black_box(key)));
        });
    }
    group.finish();
}

criterion_group!(benches, key_naming);
criterion_main!(benches);
