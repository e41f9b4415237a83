//! Every limit that decided a request is in its response's headers, over real HTTP, on the
//! axum layer and the actix-web middleware, on a real `redis-server` (issue 33): the
//! router-wide limit on the first request of a route too (and a nested group's with the
//! router's), the limit of a call that cost nothing, the burst of a call that costs more than
//! it (413), and never the state of a bucket nobody asked (a 503 from a failing async key
//! resolver). One test (one server, one limiter) for the file: the limiter is process-wide.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use redis_ratelimit::key::{AsyncKeyResolver, ResolveError};
use redis_ratelimit::{
    Header, RateLimitLayer, RateLimitMiddleware, RateLimited, RateLimiter, RequestContext,
    enable_redis_rate_limit, http::LayerLimit, layer_limit, rate_limit,
};
use reqwest::Response;
use testkit::RedisServer;

mod support;

/// Each client (one per framework) has buckets of its own.
const CLIENT: Header = Header("x-client");

/// A session store that is down: every key lookup fails.
struct SessionStoreDown;

impl AsyncKeyResolver for SessionStoreDown {
    async fn resolve(&self, _: &RequestContext) -> Result<Option<String>, ResolveError> {
        Err("session store unreachable".into())
    }
}

#[rate_limit(replenish = 10, unit = "minute", key = CLIENT, name = "orders")]
async fn orders() -> Result<&'static str, RateLimited> {
    Ok("orders")
}

/// `n` files: a call of 0 takes nothing, one above the burst of 5 is refused with 413.
#[rate_limit(replenish = 5, unit = "minute", key = CLIENT, cost = n, name = "upload")]
async fn upload(n: u32) -> Result<String, RateLimited> {
    Ok(format!("{n} files"))
}

#[rate_limit(replenish = 10, unit = "minute", key = SessionStoreDown, name = "feed")]
async fn feed() -> Result<&'static str, RateLimited> {
    Ok("feed")
}

async fn stats() -> &'static str {
    "stats"
}

/// 30 requests a minute per client, on every route.
fn site() -> LayerLimit {
    layer_limit!(name = "site", replenish = 30, unit = "minute", key = CLIENT)
}

/// 20 a minute per client on the admin group, on top of `site`.
fn staff() -> LayerLimit {
    layer_limit!(
        name = "staff",
        replenish = 20,
        unit = "minute",
        key = CLIENT
    )
}

async fn serve_axum() -> SocketAddr {
    use axum::extract::Path;
    use axum::routing::get;

    let admin = axum::Router::new()
        .route("/stats", get(stats))
        .route_layer(RateLimitLayer::new().limit(staff()));
    let app = axum::Router::new()
        .route("/orders", get(orders))
        .route("/upload/{n}", get(|Path(n): Path<u32>| upload(n)))
        .route("/feed", get(feed))
        .nest("/admin", admin)
        .layer(RateLimitLayer::new().limit(site()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn serve_actix() -> (SocketAddr, actix_web::dev::ServerHandle) {
    use actix_web::{App, web};

    support::serve_actix!(actix_web::HttpServer::new(|| {
        App::new()
            .wrap(RateLimitMiddleware::new().limit(site()))
            .route("/orders", web::get().to(orders))
            .route(
                "/upload/{n}",
                web::get().to(|n: web::Path<u32>| upload(n.into_inner())),
            )
            .route("/feed", web::get().to(feed))
            .service(
                web::scope("/admin")
                    .wrap(RateLimitMiddleware::new().limit(staff()))
                    .route("/stats", web::get().to(stats)),
            )
    }))
}

/// A GET of `path` on `server` as `client`.
async fn get(server: SocketAddr, client: &str, path: &str) -> Response {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("http://{server}{path}"))
        .header("x-client", client)
        .send()
        .await
        .unwrap()
}

/// The response's header `name`, empty when it has none.
fn header(r: &Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// That `r`'s `RateLimit-Policy` lists exactly `policies`.
fn assert_policies(r: &Response, policies: &str, at: &str) {
    assert_eq!(
        header(r, "ratelimit-policy"),
        policies,
        "{at}: {:?}",
        r.headers()
    );
}

/// Every case, against the service at `server`, as `client`.
async fn every_deciding_limit_is_described(server: SocketAddr, client: &str) {
    let at = |what: &str| format!("{client}: {what}");

    // The first request of a route: the layer decides its limit first, then the handler its
    // own; the response describes both, as on the route's later requests.
    let first = get(server, client, "/orders").await;
    assert_eq!(first.status(), 200, "{}", at("first /orders"));
    assert_policies(
        &first,
        "\"site\";q=30;w=60, \"orders\";q=10;w=60",
        &at("first /orders"),
    );
    let state = header(&first, "ratelimit");
    assert!(
        state.starts_with("\"site\";r=29;") && state.contains(", \"orders\";r=9;"),
        "{}: {state}",
        at("first /orders")
    );
    let second = get(server, client, "/orders").await;
    let state = header(&second, "ratelimit");
    assert!(
        state.starts_with("\"site\";r=28;") && state.contains(", \"orders\";r=8;"),
        "{}: {state}",
        at("second /orders")
    );

    // A call that costs nothing takes nothing and asks no bucket: its limit's policy is
    // described, its state is not; the first request of the route, and a learned one.
    for i in 0..2 {
        let free = get(server, client, "/upload/0").await;
        assert_eq!(free.status(), 200);
        assert_policies(
            &free,
            "\"site\";q=30;w=60, \"upload\";q=5;w=60",
            &at(&format!("cost 0, request {i}")),
        );
        let state = header(&free, "ratelimit");
        assert!(
            state.starts_with("\"site\";r=") && !state.contains("upload"),
            "{}: {state}",
            at("cost 0")
        );
    }

    // More than the burst holds: 413, and the policy tells the client the burst.
    let too_big = get(server, client, "/upload/9").await;
    assert_eq!(too_big.status(), 413);
    assert!(
        header(&too_big, "ratelimit-policy").contains("\"upload\";q=5;w=60"),
        "{}: {:?}",
        at("413"),
        too_big.headers()
    );
    assert!(!header(&too_big, "ratelimit").contains("upload"));
    assert_eq!(header(&too_big, "x-ratelimit-burst-capacity"), "5");
    assert_eq!(header(&too_big, "x-ratelimit-requested-tokens"), "9");
    assert_eq!(header(&too_big, "x-ratelimit-remaining"), "");
    assert_eq!(header(&too_big, "retry-after"), "", "no wait admits it");

    // The key's resolver failed: 503 by the failure policy, which asked no bucket; the first
    // request of the route (the layer's limit decided first) and a learned one.
    for i in 0..2 {
        let unavailable = get(server, client, "/feed").await;
        assert_eq!(unavailable.status(), 503);
        let at = at(&format!("503, request {i}"));
        assert!(
            header(&unavailable, "ratelimit-policy").contains("\"feed\";q=10;w=60"),
            "{at}: {:?}",
            unavailable.headers()
        );
        let state = header(&unavailable, "ratelimit");
        assert!(!state.contains("\"feed\""), "{at}: {state}");
        assert_eq!(header(&unavailable, "x-ratelimit-remaining"), "", "{at}");
    }

    // A group's layer under the router's: its first request describes both.
    let nested = get(server, client, "/admin/stats").await;
    assert_eq!(nested.status(), 200);
    assert_policies(
        &nested,
        "\"site\";q=30;w=60, \"staff\";q=20;w=60",
        &at("first /admin/stats"),
    );
    let state = header(&nested, "ratelimit");
    assert!(state.contains("\"staff\";r=19;"), "{state}");
    let learned = get(server, client, "/admin/stats").await;
    assert_policies(
        &learned,
        "\"site\";q=30;w=60, \"staff\";q=20;w=60",
        &at("second /admin/stats"),
    );
}

#[actix_web::test]
async fn every_limit_that_decided_a_request_is_in_its_headers() {
    let redis = RedisServer::start();
    enable_redis_rate_limit!(
        prefix = "layer-headers",
        builder = RateLimiter::builder().redis(redis.url()).instance(false)
    )
    .await
    .unwrap();

    every_deciding_limit_is_described(serve_axum().await, "axum-client").await;
    let (actix, handle) = serve_actix();
    every_deciding_limit_is_described(actix, "actix-client").await;
    handle.stop(false).await;
}
