//! One request at a time: the service's latency beside a bare Redis round trip, and what
//! Envoy's rate-limit filter adds to an HTTP request.
//!
//! On one `redis-server` this bench starts (with the project's module when
//! `RATELIMIT_MODULE` names it), in one sitting:
//! - `redis-benchmark -c 1 -P 1` of `PING` and of `INCR` (the bare round trip), its p50;
//! - the limiter's call, then the service's own decision (`Service::decide`: what its
//!   `response_time` histogram counts), in the service's runtime, without gRPC;
//! - one gRPC client asking the service (in this process, its own runtime) one
//!   one-descriptor request after another, every one admitted: p50 and p99;
//! - Envoy in front of a small upstream, without and with the rate-limit filter calling the
//!   service, one HTTP request after another on a connection of its own: p50 of each, and
//!   their difference.
//!
//! ```sh
//! RATELIMIT_MODULE=target/module/release/libratelimit_module.so \
//!   cargo bench -p redis-ratelimit-envoy --bench latency
//! # the service's runtime on its own thread alone, not one worker thread
//! cargo bench -p redis-ratelimit-envoy --bench latency -- --current-thread
//! ```
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelimit_core::RateLimiter;
use ratelimit_envoy::config::Config;
use ratelimit_envoy::service::Service;
use testkit::envoy::{Action, Bootstrap, Envoy, RateLimitFilter, RateLimitPolicy, Upstream};

/// Requests per measurement.
const N: usize = 20_000;
/// HTTP requests through Envoy per measurement (each on a connection of its own).
const HTTP: usize = 3_000;

/// Every request admitted: a billion an hour per user.
const YAML: &str = "
domain: bench
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1000000000, algorithm: token_bucket }
";

/// The `per_mille`-th thousandth of `sorted` (nearest rank).
fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    sorted[(sorted.len() - 1) * per_mille / 1000]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `redis-benchmark -c 1`'s p50 of `test`, in µs.
fn redis_benchmark_p50(port: u16, test: &str) -> f64 {
    let out = std::process::Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-c",
            "1",
            "-n",
            &N.to_string(),
            "-t",
            test,
            "--csv",
        ])
        .output()
        .expect("redis-benchmark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let line = text.lines().nth(1).expect("a result line");
    let fields: Vec<&str> = line.split(',').map(|f| f.trim_matches('"')).collect();
    fields[4].parse::<f64>().expect("p50") * 1000.0
}

fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let module = testkit::module::load_args();
    let redis = testkit::RedisServer::start_with(&module);
    let ping = redis_benchmark_p50(redis.port(), "ping");
    let incr = redis_benchmark_p50(redis.port(), "incr");

    // The service on a thread and a runtime of its own, as a process of its own would have
    // it: one worker thread (`--current-thread`: the thread itself, every task on it). The
    // limiter's own call is measured there first (the Redis round trip and the library),
    // before any gRPC traffic.
    let current_thread = std::env::args().any(|a| a == "--current-thread");
    let url = redis.url();
    let (ready, started) = std::sync::mpsc::channel::<(SocketAddr, Vec<Duration>, Vec<Duration>)>();
    std::thread::spawn(move || {
        let runtime = if current_thread {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap()
        };
        runtime.block_on(async move {
            let limiter = RateLimiter::builder()
                .redis(url)
                .prefix("bench")
                .build()
                .await
                .unwrap();
            let path = format!("{:?}", limiter.redis_path());
            println!("service's Redis path: {path}; current thread: {current_thread}");
            let limit = *Config::parse("bench.yaml", YAML)
                .unwrap()
                .rules("bench")
                .next()
                .unwrap()
                .limit()
                .unwrap();
            let mut direct = Vec::with_capacity(N);
            for i in 0..N + 1_000 {
                let key = format!("d{}", i % 1_000);
                let start = Instant::now();
                let d = limiter
                    .check_all_named(&[("direct", &key, &limit, 1)])
                    .await
                    .unwrap();
                if i >= 1_000 {
                    direct.push(start.elapsed());
                }
                assert!(d.allowed);
            }
            let service = Service::new(limiter, Config::parse("bench.yaml", YAML).unwrap());
            // The service's own time for a request: what its `response_time` histogram
            // counts (the request decoded to the answer made), without the gRPC hop.
            let mut decide = Vec::with_capacity(N);
            for i in 0..N + 1_000 {
                let r = request(&format!("s{}", i % 1_000));
                let start = Instant::now();
                let answer = service.decide(&r).await.unwrap();
                if i >= 1_000 {
                    decide.push(start.elapsed());
                }
                assert_eq!(answer.overall_code, Code::Ok as i32);
            }
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            ready.send((addr, direct, decide)).unwrap();
            ratelimit_envoy::server::serve(service, listener, std::future::pending())
                .await
                .unwrap();
        });
    });
    let (addr, mut direct, mut decide) = started.recv().unwrap();
    direct.sort();
    decide.sort();

    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut grpc: Vec<Duration> = client_rt.block_on(async {
        let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        // Warm: the connection, the script or the module's command loaded.
        for i in 0..1_000 {
            client
                .should_rate_limit(request(&format!("w{i}")))
                .await
                .unwrap();
        }
        let mut times = Vec::with_capacity(N);
        for i in 0..N {
            let r = request(&format!("u{}", i % 1_000));
            let start = Instant::now();
            let answer = client.should_rate_limit(r).await.unwrap().into_inner();
            times.push(start.elapsed());
            assert_eq!(answer.overall_code, Code::Ok as i32);
        }
        times
    });
    grpc.sort();

    // Where the time goes: the same server answering grpc.health.v1 (the gRPC round trip
    // alone).
    let mut health: Vec<Duration> = client_rt.block_on(async {
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = HealthClient::new(channel);
        let mut times = Vec::with_capacity(N);
        for i in 0..N + 1_000 {
            let start = Instant::now();
            client
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .unwrap();
            if i >= 1_000 {
                times.push(start.elapsed());
            }
        }
        times
    });
    health.sort();

    // Envoy, without and with the filter.
    let upstream = Upstream::start();
    let plain = Envoy::start(&Bootstrap::new(upstream.addr()));
    let limited = Envoy::start(
        &Bootstrap::new(upstream.addr())
            .rate_limit_filter(RateLimitFilter::new("bench", addr).timeout(Duration::from_secs(5)))
            .route_rate_limit(RateLimitPolicy::new([Action::request_headers(
                "x-user", "user",
            )])),
    );
    let http = |envoy: &Envoy| {
        for i in 0..200 {
            assert_eq!(envoy.get("/", &[("x-user", &format!("w{i}"))]).status, 200);
        }
        let mut times = Vec::with_capacity(HTTP);
        for i in 0..HTTP {
            let user = format!("h{}", i % 100);
            let start = Instant::now();
            let status = envoy.get("/", &[("x-user", &user)]).status;
            times.push(start.elapsed());
            assert_eq!(status, 200);
        }
        times.sort();
        times
    };
    // Interleaved halves, so that a slow moment of the machine falls on both.
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        without.extend(http(&plain));
        with.extend(http(&limited));
    }
    without.sort();
    with.sort();

    println!(
        "one request at a time, µs (p50; p99 where given); {N} gRPC requests, {} HTTP requests each way",
        2 * HTTP
    );
    println!(
        "{:<58} {:>10}",
        "redis-benchmark -c 1, PING, p50",
        format!("{ping:.1}")
    );
    println!(
        "{:<58} {:>10}",
        "redis-benchmark -c 1, INCR, p50",
        format!("{incr:.1}")
    );
    println!(
        "{:<58} {:>10} {:>10}",
        "ShouldRateLimit, one descriptor, p50 / p99",
        format!("{:.1}", micros(percentile(&grpc, 500))),
        format!("{:.1}", micros(percentile(&grpc, 990)))
    );
    println!(
        "{:<58} {:>10}",
        "grpc.health.v1 Check on the same server, p50",
        format!("{:.1}", micros(percentile(&health, 500)))
    );
    println!(
        "{:<58} {:>10}",
        "RateLimiter::check_all_named in-process, p50",
        format!("{:.1}", micros(percentile(&direct, 500)))
    );
    println!(
        "{:<58} {:>10}",
        "Service::decide in-process (its response_time), p50",
        format!("{:.1}", micros(percentile(&decide, 500)))
    );
    println!(
        "{:<58} {:>10}",
        "  ÷ redis-benchmark's PING p50",
        format!("{:.2}", micros(percentile(&decide, 500)) / ping)
    );
    println!(
        "{:<58} {:>10}",
        "ShouldRateLimit ÷ redis-benchmark's PING p50",
        format!("{:.2}", micros(percentile(&grpc, 500)) / ping)
    );
    let (a, b) = (percentile(&without, 500), percentile(&with, 500));
    println!(
        "{:<58} {:>10}",
        "HTTP through Envoy, no rate-limit filter, p50",
        format!("{:.1}", micros(a))
    );
    println!(
        "{:<58} {:>10}",
        "HTTP through Envoy, with the filter, p50",
        format!("{:.1}", micros(b))
    );
    println!(
        "{:<58} {:>10}",
        "  what the filter adds, p50",
        format!("{:.1}", micros(b) - micros(a))
    );
}
