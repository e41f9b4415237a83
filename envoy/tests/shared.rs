//! One limit, two entrances: a rule that names a limit of a Rust service (`shared: search`)
//! draws from the bucket the service's `#[rate_limit(name = "search")]` handler draws from,
//! the edge (Envoy, calling the rate-limit service) and the handler behind it taking from
//! one bucket per user, on one Redis.

use std::net::SocketAddr;

use axum::routing::get;
use ratelimit_core::RateLimiter;
use ratelimit_envoy::config::Config;
use ratelimit_envoy::service::Service;
use redis_ratelimit::{Header, RateLimitLayer, RateLimited, enable_redis_rate_limit, rate_limit};
use testkit::RedisServer;
use testkit::envoy::{Action, Bootstrap, Envoy, RateLimitFilter, RateLimitPolicy};

/// The prefix both the handler's limiter and the service's use: the buckets' namespace.
const PREFIX: &str = "shared-test";

/// Four searches a minute per user, as a token bucket: declared by the Rust service.
#[rate_limit(replenish = 4, burst = 4, unit = "minute", key = Header("x-user"), name = "search")]
async fn search() -> Result<&'static str, RateLimited> {
    Ok("results")
}

/// The same limit at the edge, by the user Envoy reads from the same header.
const EDGE: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 4, algorithm: token_bucket, burst: 4, shared: search }
";

async fn serve_search() -> SocketAddr {
    let app = axum::Router::new()
        .route("/search", get(search))
        .layer(RateLimitLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn serve_edge(limiter: RateLimiter) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let service = Service::new(limiter, Config::parse("edge.yaml", EDGE).expect("valid"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let addr = listener.local_addr().expect("bound");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(ratelimit_envoy::server::serve(service, listener, async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_and_a_handler_draw_from_one_bucket() {
    let redis = RedisServer::start();
    enable_redis_rate_limit!(
        prefix = PREFIX,
        builder = RateLimiter::builder().redis(redis.url()).instance(false)
    )
    .await
    .expect("the handler's limiter");
    let edge_limiter = RateLimiter::builder()
        .redis(redis.url())
        .prefix(PREFIX)
        .instance(false)
        .build()
        .await
        .expect("the service's limiter");
    let upstream = serve_search().await;
    let (service, _stop) = serve_edge(edge_limiter.clone()).await;

    let (alice, bob) = tokio::task::spawn_blocking(move || {
        let envoy = Envoy::start(
            &Bootstrap::new(upstream)
                .rate_limit_filter(RateLimitFilter::new("edge", service).failure_mode_deny(true))
                .route_rate_limit(RateLimitPolicy::new([Action::request_headers(
                    "x-user", "user",
                )])),
        );
        // Each request takes a token at the edge and one in the handler: two per request.
        let alice: Vec<u16> = (0..3)
            .map(|_| envoy.get("/search", &[("x-user", "alice")]).status)
            .collect();
        let bob = envoy.get("/search", &[("x-user", "bob")]).status;
        (alice, bob)
    })
    .await
    .expect("the requests");
    // Two requests of two tokens each empty alice's four; the third is refused at the edge.
    assert_eq!(alice, [200, 200, 429]);
    // Bob's bucket is his own.
    assert_eq!(bob, 200);
    // The bucket both drew from, as the handler's limiter names it: empty for alice, and
    // bob's with the two tokens his request took.
    let limit = ratelimit_core::Limit::per_minute(4).burst(4);
    let left = |user: &'static str| {
        let limiter = edge_limiter.clone();
        async move {
            limiter
                .peek_named("search", user, &limit)
                .await
                .expect("a peek")
                .remaining
        }
    };
    assert_eq!(left("alice").await, 0);
    assert_eq!(left("bob").await, 2);
}
