//! Accuracy behind Envoy: two service instances over one Redis, 64 clients sending requests
//! on one key for 10 s through Envoy; the requests admitted against the most the limit
//! allows over the run.
//!
//! The limit is a token bucket of 200 a second with a burst of 200: over a run of `t`
//! seconds (from just before the first request is sent to just after the last answer), at
//! most `200 + 200 t` are admitted. Exact means admitted ≤ that bound, and close to it
//! (≥ 0.99 × it) under this load. The clients' clock only widens the bound (the run as the
//! clients see it contains the run as Redis saw it).
//!
//! ```sh
//! RATELIMIT_MODULE=target/module/release/libratelimit_module.so \
//!   cargo bench -p redis-ratelimit-envoy --bench accuracy
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratelimit_core::RateLimiter;
use ratelimit_envoy::config::Config;
use ratelimit_envoy::service::Service;
use testkit::envoy::{Action, Bootstrap, Envoy, RateLimitFilter, RateLimitPolicy, Upstream};

const CLIENTS: usize = 64;
const RUN: Duration = Duration::from_secs(10);
const RATE: u64 = 200;
const BURST: u64 = 200;

const YAML: &str = "
domain: bench
descriptors:
  - key: generic_key
    value: one
    rate_limit: { unit: second, requests_per_unit: 200, algorithm: token_bucket, burst: 200 }
";

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let module = testkit::module::load_args();
    let redis = testkit::RedisServer::start_with(&module);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = redis.url();
    let services: Vec<SocketAddr> = runtime.block_on(async move {
        let mut addrs = Vec::new();
        for _ in 0..2 {
            // Two instances: each a limiter of its own, as two processes would have.
            let limiter = RateLimiter::builder()
                .redis(url.clone())
                .prefix("accuracy")
                .build()
                .await
                .unwrap();
            let service = Service::new(limiter, Config::parse("bench.yaml", YAML).unwrap());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap());
            tokio::spawn(ratelimit_envoy::server::serve(
                service,
                listener,
                std::future::pending(),
            ));
        }
        addrs
    });
    let upstream = Upstream::start();
    let envoy = Arc::new(Envoy::start(
        &Bootstrap::new(upstream.addr()).rate_limit_filter(
            RateLimitFilter::new("bench", services[0])
                .and_service(services[1])
                .timeout(Duration::from_secs(5))
                .failure_mode_deny(true)
                .rate_limit(RateLimitPolicy::new([Action::generic_key("one")])),
        ),
    ));
    let (admitted, refused, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (envoy, admitted, refused, other, stop) = (
                Arc::clone(&envoy),
                Arc::clone(&admitted),
                Arc::clone(&refused),
                Arc::clone(&other),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match envoy.get("/", &[]).status {
                        200 => admitted.fetch_add(1, Ordering::Relaxed),
                        429 => refused.fetch_add(1, Ordering::Relaxed),
                        _ => other.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let t = start.elapsed();
    let admitted = admitted.load(Ordering::Relaxed);
    let bound = BURST as f64 + RATE as f64 * t.as_secs_f64();
    println!(
        "two instances behind Envoy, {CLIENTS} clients on one key, {:.2} s: {admitted} admitted \
         (the upstream served {}), {} refused, {} other; bound {bound:.0}; admitted / bound {:.4}",
        t.as_secs_f64(),
        upstream.served(),
        refused.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
        admitted as f64 / bound
    );
}
