//! A router-wide limit on the axum layer (`layer_limit!`), on a real `redis-server`: decided
//! before the handler, refused with the same 429 and headers; with a handler's own
//! `#[rate_limit]`, all or nothing in one script call once the route is learned; a route
//! group's layer nested under the router's; a request an extractor refused still counts;
//! listed by `declared_limits()` and overridden by name. One test (one server) for the file:
//! the limiter is a process-wide static. The actix-web middleware, in memory, is in
//! `tests/layer_limit_actix.rs`.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path};
use axum::http::Request;
use axum::response::Response;
use axum::routing::get;
use redis_ratelimit::{
    Global, Header, Ip, Limit, RateLimitLayer, RateLimited, RateLimiter, declared_limits,
    enable_redis_rate_limit, layer_limit, rate_limit,
};
use testkit::RedisServer;
use tower::ServiceExt as _;

static ORDERS_RAN: AtomicUsize = AtomicUsize::new(0);
static HEALTH_RAN: AtomicUsize = AtomicUsize::new(0);
static STATS_RAN: AtomicUsize = AtomicUsize::new(0);

/// Two orders a day in all, on top of the router's limit.
#[rate_limit(replenish = 2, unit = "day", key = Global, name = "orders")]
async fn orders() -> Result<&'static str, RateLimited> {
    ORDERS_RAN.fetch_add(1, Ordering::SeqCst);
    Ok("orders")
}

#[rate_limit(replenish = 100, unit = "day", key = Global, name = "items")]
async fn item(Path(id): Path<u32>) -> Result<String, RateLimited> {
    Ok(format!("item {id}"))
}

/// Keyed by a header the requests below do not send: refused for want of a key.
#[rate_limit(replenish = 5, unit = "day", key = Header("x-user"), name = "by_user")]
async fn by_user() -> Result<&'static str, RateLimited> {
    Ok("yours")
}

async fn health() -> &'static str {
    HEALTH_RAN.fetch_add(1, Ordering::SeqCst);
    "ok"
}

async fn stats() -> &'static str {
    STATS_RAN.fetch_add(1, Ordering::SeqCst);
    "stats"
}

fn app() -> Router {
    // The admin group: one request a day per client, on top of the router's limit.
    let admin = Router::new()
        .route("/stats", get(stats))
        .route_layer(RateLimitLayer::new().limit(layer_limit!(
            name = "admin",
            replenish = 1,
            unit = "day",
            key = Ip
        )));
    Router::new()
        .route("/orders", get(orders))
        .route("/health", get(health))
        .route("/items/{id}", get(item))
        .route("/by_user", get(by_user))
        .nest("/admin", admin)
        // Declared 100 a day per client; the overrides file makes it 4.
        .layer(RateLimitLayer::new().limit(layer_limit!(
            name = "api",
            replenish = 100,
            unit = "day",
            key = Ip
        )))
}

async fn get_as(app: &Router, client: &str, path: &str) -> Response {
    let mut req = Request::get(path).body(Body::empty()).unwrap();
    let peer: SocketAddr = format!("{client}:5000").parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    app.clone().oneshot(req).await.unwrap()
}

fn header(response: &Response, name: &str) -> String {
    response
        .headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the `api` limit holds for `client`, as the store says.
async fn api_left(limiter: &RateLimiter, client: &str) -> u64 {
    let api = Limit::per_day(4);
    limiter
        .peek_named("api", client, &api)
        .await
        .unwrap()
        .remaining
}

#[tokio::test]
async fn a_layer_limit_is_decided_before_the_handler_and_with_its_limits() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, "[limits.api]\nreplenish = 4\nburst = 4\n").unwrap();
    let url = server.url();
    let limiter = enable_redis_rate_limit!(
        prefix = "layer",
        config = config,
        builder = RateLimiter::builder().redis(url).instance(false)
    )
    .await
    .unwrap();

    // Listed with the functions' limits, overridden by name.
    let listed: Vec<_> = declared_limits()
        .into_iter()
        .map(|d| (d.name(), d.effective().limit))
        .collect();
    assert!(listed.contains(&("api", Limit::per_day(4))), "{listed:?}");
    assert!(listed.contains(&("admin", Limit::per_day(1))), "{listed:?}");

    let app = app();
    let a = "203.0.113.1";

    // A route without limits of its own: the layer's alone, described in the headers.
    let ok = get_as(&app, a, "/health").await;
    assert_eq!(ok.status(), 200);
    assert!(
        header(&ok, "ratelimit-policy").contains("\"api\""),
        "{ok:?}"
    );
    assert_eq!(api_left(limiter, a).await, 3);

    // The first request of a route with limits: the layer decides first, the handler its own.
    assert_eq!(get_as(&app, a, "/orders").await.status(), 200);
    assert_eq!(api_left(limiter, a).await, 2);

    // Learned: the handler's check decides the layer's limit with its own, in one script.
    let before = server.script_calls().await;
    let ok = get_as(&app, a, "/orders").await;
    assert_eq!(server.script_calls().await - before, 1);
    assert_eq!(ok.status(), 200);
    let policy = header(&ok, "ratelimit-policy");
    assert!(
        policy.contains("\"api\"") && policy.contains("\"orders\""),
        "{policy}"
    );
    assert_eq!(api_left(limiter, a).await, 1);
    assert_eq!(ORDERS_RAN.load(Ordering::SeqCst), 2);

    // `orders` is spent: the call is refused, and the layer's limit took nothing.
    let refused = get_as(&app, a, "/orders").await;
    assert_eq!(refused.status(), 429);
    assert!(
        header(&refused, "ratelimit").contains("\"orders\""),
        "{refused:?}"
    );
    assert_eq!(api_left(limiter, a).await, 1);
    assert_eq!(ORDERS_RAN.load(Ordering::SeqCst), 2);

    // The layer's last token, then a refusal before the handler runs.
    assert_eq!(get_as(&app, a, "/health").await.status(), 200);
    let refused = get_as(&app, a, "/health").await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().get("retry-after").is_some());
    assert!(
        header(&refused, "ratelimit").contains("\"api\""),
        "{refused:?}"
    );
    assert_eq!(HEALTH_RAN.load(Ordering::SeqCst), 2);

    // A route group under the router: both layers' limits, all or nothing. The first request
    // teaches the router's layer that the group's decides below it.
    let b = "203.0.113.2";
    assert_eq!(get_as(&app, b, "/admin/stats").await.status(), 200);
    assert_eq!(api_left(limiter, b).await, 3);
    let refused = get_as(&app, b, "/admin/stats").await;
    assert_eq!(refused.status(), 429);
    assert!(
        header(&refused, "ratelimit").contains("\"admin\""),
        "{refused:?}"
    );
    // The group refused: the router's limit took nothing either.
    assert_eq!(api_left(limiter, b).await, 3);
    let _ = get_as(&app, b, "/admin/stats").await;
    assert_eq!(api_left(limiter, b).await, 3);
    assert_eq!(STATS_RAN.load(Ordering::SeqCst), 1);

    // A learned route whose extractor refuses the request: it counts all the same.
    let c = "203.0.113.3";
    assert_eq!(get_as(&app, c, "/items/1").await.status(), 200);
    assert_eq!(get_as(&app, c, "/items/2").await.status(), 200);
    assert_eq!(api_left(limiter, c).await, 2);
    assert_eq!(get_as(&app, c, "/items/x").await.status(), 400);
    assert_eq!(api_left(limiter, c).await, 1);
    assert_eq!(get_as(&app, c, "/items/3").await.status(), 200);
    assert_eq!(api_left(limiter, c).await, 0);
    // Spent: refused before the extractor, and before the handler.
    assert_eq!(get_as(&app, c, "/items/x").await.status(), 429);
    assert_eq!(get_as(&app, c, "/items/4").await.status(), 429);

    // The first request of a route is decided by the layer first, then by the handler: when
    // the handler refuses it, the layer's token is given back (through the store, once the
    // refusal is answered), so that it takes nothing there either.
    let d = "203.0.113.4";
    assert_eq!(get_as(&app, d, "/by_user").await.status(), 403);
    let mut left = api_left(limiter, d).await;
    for _ in 0..200 {
        if left == 4 {
            break;
        }
        tokio::task::yield_now().await;
        left = api_left(limiter, d).await;
    }
    assert_eq!(left, 4, "the layer's token came back");
    // Learned since: one decision, nothing taken.
    assert_eq!(get_as(&app, d, "/by_user").await.status(), 403);
    assert_eq!(api_left(limiter, d).await, 4);
}
