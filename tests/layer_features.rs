//! What a router-wide limit reads from each request and its response, on the axum layer, in
//! memory and on a real `redis-server`: requests it exempts (health checks) pass untaken, each
//! request is decided under the tier it picks from the request (a plan header), and only the
//! responses it counts (server errors) take from the bucket. Each on a route the layer decides
//! alone, and on a route whose handler has a limit of its own (decided together with it, in
//! one script, once the route is learned). Each test runs in a process of its own (nextest)
//! and enables the global limiter on the store it tests.
#![allow(clippy::unwrap_used)]

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use redis_ratelimit::{
    Header, Limit, RateLimitLayer, RateLimited, RequestContext, Tier, enable_redis_rate_limit,
    layer_limit, rate_limit,
};
use std::sync::LazyLock;
use testkit::RedisServer;
use tokio::sync::watch;
use tower::ServiceExt as _;

mod support;

/// The pro plan: five requests a day instead of two.
const PRO: Tier = Tier::new("pro", Limit::per_day(5));

fn is_health_check(request: &RequestContext) -> bool {
    request.path() == Some("/health")
}

fn plan(request: &RequestContext) -> Option<Tier> {
    (request.headers().get("x-plan")?.to_str().ok()? == "pro").then_some(PRO)
}

/// A handler with no limit of its own: the layer decides its requests first, every time.
/// Fails when asked to.
async fn work(request: Request<Body>) -> StatusCode {
    if request.uri().query() == Some("fail") {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

/// A handler with a generous limit of its own: once the route is learned, the router's limit
/// is decided with it, in the handler's check.
#[rate_limit(replenish = 1000, unit = "day", key = Header("x-client"), name = "own")]
async fn limited(request: Request<Body>) -> Result<StatusCode, RateLimited> {
    Ok(work(request).await)
}

/// Requests of [`held`] admitted and running (each then holds its tokens until [`GO`]), told
/// to whoever waits for them.
static RUNNING: LazyLock<watch::Sender<usize>> = LazyLock::new(|| watch::Sender::new(0));
/// Lets the requests of [`held`] answer.
static GO: LazyLock<watch::Sender<bool>> = LazyLock::new(|| watch::channel(false).0);

/// [`work`], answered once [`GO`] says so: requests in flight at once.
async fn held(request: Request<Body>) -> StatusCode {
    RUNNING.send_modify(|running| *running += 1);
    GO.subscribe().wait_for(|go| *go).await.unwrap();
    work(request).await
}

async fn health() -> &'static str {
    "ok"
}

/// One request a day per token, letting requests without one through; and one a day per
/// client in shadow mode, which never refuses.
fn lenient_app() -> Router {
    Router::new()
        .route("/work", get(work))
        .route("/limited", get(limited))
        .layer(
            RateLimitLayer::new()
                .limit(layer_limit!(
                    name = "tokens",
                    replenish = 1,
                    unit = "day",
                    key = Header("x-token"),
                    empty_key = "allow"
                ))
                .limit(layer_limit!(
                    name = "watched",
                    replenish = 1,
                    unit = "day",
                    key = Header("x-client"),
                    shadow = true
                )),
        )
}

/// Two requests a day per client, under three rules of the router's: health checks exempt,
/// the plan's tier, and only server errors counted (in the `counted` router).
fn app(counted: bool) -> Router {
    let router = Router::new()
        .route("/work", get(work))
        .route("/limited", get(limited))
        .route("/health", get(health))
        .route("/held", get(held));
    if counted {
        router.layer(RateLimitLayer::new().limit(layer_limit!(
            name = "failures",
            replenish = 2,
            unit = "day",
            key = Header("x-client"),
            count = StatusCode::is_server_error
        )))
    } else {
        router.layer(RateLimitLayer::new().limit(layer_limit!(
            name = "api",
            replenish = 2,
            unit = "day",
            key = Header("x-client"),
            exempt = is_health_check,
            tier = plan,
            tiers = [PRO]
        )))
    }
}

async fn enable(server: Option<&RedisServer>) {
    match server {
        Some(server) => enable_redis_rate_limit!(url = server.url(), prefix = "layer-features")
            .await
            .unwrap(),
        None => enable_redis_rate_limit!(url = "memory://", prefix = "layer-features")
            .await
            .unwrap(),
    };
}

/// The status of `path` for `client`, with the headers `extra`.
async fn get_as(app: &Router, path: &str, client: &str, extra: &[(&str, &str)]) -> StatusCode {
    let mut request = Request::get(path).header("x-client", client);
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    response.status()
}

/// How many of `n` requests were answered `status`.
async fn count_of(
    app: &Router,
    status: StatusCode,
    n: usize,
    path: &str,
    client: &str,
    extra: &[(&str, &str)],
) -> usize {
    let mut seen = 0;
    for _ in 0..n {
        if get_as(app, path, client, extra).await == status {
            seen += 1;
        }
    }
    seen
}

async fn health_checks_are_exempt(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let app = app(false);
    for path in ["/work", "/limited"] {
        let client = format!("exempt{path}");
        // However many health checks, the client's two requests are still there.
        assert_eq!(
            count_of(&app, StatusCode::OK, 10, "/health", &client, &[]).await,
            10
        );
        assert_eq!(
            count_of(&app, StatusCode::OK, 3, path, &client, &[]).await,
            2,
            "{path}"
        );
        // And exempt once the bucket is empty.
        assert_eq!(get_as(&app, "/health", &client, &[]).await, StatusCode::OK);
    }
}

async fn each_request_is_decided_under_its_tier(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let app = app(false);
    let pro = [("x-plan", "pro")];
    for path in ["/work", "/limited"] {
        let (free_client, pro_client) = (format!("free{path}"), format!("pro{path}"));
        assert_eq!(
            count_of(&app, StatusCode::OK, 4, path, &free_client, &[]).await,
            2
        );
        assert_eq!(
            count_of(&app, StatusCode::OK, 8, path, &pro_client, &pro).await,
            5
        );
        // The refusal names the tier in force.
        let refused = app
            .clone()
            .oneshot(
                Request::get(path)
                    .header("x-client", &pro_client)
                    .header("x-plan", "pro")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let policy = refused.headers()["ratelimit-policy"].to_str().unwrap();
        assert!(policy.contains("api[pro]"), "{policy}");
    }
}

async fn only_the_responses_it_counts_take(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let app = app(true);
    for path in ["/work", "/limited"] {
        let client = format!("counted{path}");
        let failing = format!("{path}?fail");
        // Successes take nothing back: as many as the client likes.
        assert_eq!(
            count_of(&app, StatusCode::OK, 6, path, &client, &[]).await,
            6
        );
        // Two failures count, and use the bucket up.
        assert_eq!(
            count_of(
                &app,
                StatusCode::INTERNAL_SERVER_ERROR,
                2,
                &failing,
                &client,
                &[]
            )
            .await,
            2
        );
        assert_eq!(
            get_as(&app, path, &client, &[]).await,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            get_as(&app, &failing, &client, &[]).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}

/// The statuses of 20 requests to `path` at once, answered once the limit's 2 tokens are
/// held by requests in flight.
async fn twenty_at_once(app: &Router, path: &str) -> Vec<StatusCode> {
    GO.send_replace(false);
    let before = *RUNNING.borrow();
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let (app, path) = (app.clone(), path.to_owned());
            tokio::spawn(async move { get_as(&app, &path, "parallel", &[]).await })
        })
        .collect();
    // The event of their admission (the bound only stops a hang).
    let mut running = RUNNING.subscribe();
    let two_running = running.wait_for(|running| *running >= before + 2);
    tokio::time::timeout(testkit::wait::PATIENCE, two_running)
        .await
        .expect("two requests admitted and running")
        .unwrap();
    GO.send_replace(true);
    let mut statuses = Vec::new();
    for r in requests {
        statuses.push(r.await.unwrap());
    }
    statuses
}

/// Requests in flight hold the tokens of a limit that counts server errors only, not spend
/// them: 20 requests at once that all succeed are all answered, under a limit of 2; 20 that
/// all fail are answered no more than twice.
async fn parallel_requests_wait_for_the_tokens_held_in_flight(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let app = app(true);
    let ok = twenty_at_once(&app, "/held").await;
    assert!(ok.iter().all(|s| *s == StatusCode::OK), "{ok:?}");
    let failed = twenty_at_once(&app, "/held?fail").await;
    let answered = failed
        .iter()
        .filter(|s| **s == StatusCode::INTERNAL_SERVER_ERROR)
        .count();
    assert_eq!(answered, 2, "{failed:?}");
    assert!(
        failed
            .iter()
            .all(|s| *s == StatusCode::INTERNAL_SERVER_ERROR || *s == StatusCode::TOO_MANY_REQUESTS),
        "{failed:?}"
    );
}

async fn a_layer_limit_has_its_own_empty_key_policy_and_shadow_mode(server: Option<RedisServer>) {
    enable(server.as_ref()).await;
    let app = lenient_app();
    for path in ["/work", "/limited"] {
        let client = format!("lenient{path}");
        // No token: let through, however many; the shadow limit never refuses either.
        assert_eq!(
            count_of(&app, StatusCode::OK, 5, path, &client, &[]).await,
            5
        );
        // With a token: one a day.
        let token_value = format!("t{path}");
        let token = [("x-token", token_value.as_str())];
        let token_client = format!("token{path}");
        assert_eq!(
            count_of(&app, StatusCode::OK, 3, path, &token_client, &token).await,
            1
        );
    }
}

support::on_memory_and_redis!(
    health_checks_are_exempt,
    each_request_is_decided_under_its_tier,
    only_the_responses_it_counts_take,
    parallel_requests_wait_for_the_tokens_held_in_flight,
    a_layer_limit_has_its_own_empty_key_policy_and_shadow_mode
);
