//! `#[rate_limit]` against a real redis-server, through `limiter = ..`: independent limits and
//! keys, the body not run when refused, `cost`, and the buckets really in Redis.
//!
//! One test (one server) for the whole file: the limiter is a process-wide static, and this
//! keeps the file correct under `cargo test` (one process) as under nextest.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis::AsyncCommands;
use redis_ratelimit::{
    FailurePolicy, Header, RateLimited, RateLimiter, RequestContext, Source, Uri, context::scope,
    context::scope_returning, rate_limit,
};
use testkit::RedisServer;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();
static EXPORTS_RUN: AtomicUsize = AtomicUsize::new(0);

#[rate_limit(replenish = 2, unit = "hour", key = Header("x-api-key"), limiter = LIMITER)]
async fn export() -> Result<&'static str, RateLimited> {
    EXPORTS_RUN.fetch_add(1, Ordering::SeqCst);
    Ok("exported")
}

#[rate_limit(replenish = 1, burst = 3, unit = "day", key = Uri, limiter = LIMITER)]
async fn page() -> Result<&'static str, RateLimited> {
    Ok("page")
}

#[rate_limit(replenish = 10, unit = "hour", cost = 4, name = "reports", key = Uri, limiter = LIMITER)]
async fn report() -> Result<&'static str, RateLimited> {
    Ok("report")
}

fn api_key(k: &str) -> RequestContext {
    RequestContext::new().with_header("x-api-key", k)
}

fn path(p: &str) -> RequestContext {
    RequestContext::new().with_path(p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_functions_on_redis() {
    let server = RedisServer::start();
    let limiter = RateLimiter::builder()
        .redis(server.url())
        .prefix("mr")
        .failure_policy(FailurePolicy::Deny)
        .deadline(Some(std::time::Duration::from_secs(10)))
        .build()
        .await
        .unwrap();
    LIMITER.set(limiter).unwrap();

    // A refused call does not run the body.
    assert!(scope(api_key("k1"), export()).await.is_ok());
    assert!(scope(api_key("k1"), export()).await.is_ok());
    let refused = scope(api_key("k1"), export()).await.unwrap_err();
    assert_eq!(EXPORTS_RUN.load(Ordering::SeqCst), 2);
    assert_eq!(refused.decision().source, Source::Store, "Redis decided");
    assert_eq!(refused.name(), Some("macro_redis::export"));
    // Another key, another bucket.
    assert!(scope(api_key("k2"), export()).await.is_ok());
    assert_eq!(EXPORTS_RUN.load(Ordering::SeqCst), 3);

    // Another function with another limit and key is independent of the first.
    for _ in 0..3 {
        assert!(scope(path("/a"), page()).await.is_ok());
    }
    assert!(scope(path("/a"), page()).await.is_err());
    assert!(scope(path("/b"), page()).await.is_ok());

    // cost = 4 of a burst of 10: two calls, 2 tokens left, the third refused.
    let (r, recorded) = scope_returning(path("/r"), report()).await;
    assert!(r.is_ok());
    assert_eq!(recorded.unwrap().decision.remaining, 6);
    assert!(scope(path("/r"), report()).await.is_ok());
    let refused = scope(path("/r"), report()).await.unwrap_err();
    assert_eq!(refused.decision().remaining, 2);
    assert_eq!(refused.decision().cost, 4);

    // The buckets are in Redis, one key per (limit, key), under the limiter's prefix.
    let mut con = server.connection().await;
    let mut keys: Vec<String> = con.keys("mr:{*").await.unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "mr:{17:macro_redis::page:/a}",
            "mr:{17:macro_redis::page:/b}",
            "mr:{19:macro_redis::export:k1}",
            "mr:{19:macro_redis::export:k2}",
            "mr:{7:reports:/r}",
        ]
    );

    // declared_limits() lists this file's functions with their place in the source.
    let source = std::fs::read_to_string(file!()).unwrap();
    for (name, marker) in [
        ("macro_redis::export", "key = Header(\"x-api-key\")"),
        ("macro_redis::page", "burst = 3, unit = \"day\""),
        ("reports", "name = \"reports\""),
    ] {
        let decl = redis_ratelimit::declared_limits()
            .into_iter()
            .find(|d| d.name() == name)
            .unwrap_or_else(|| panic!("{name} is declared"));
        assert_eq!(decl.file(), file!());
        let line = source.lines().position(|l| l.contains(marker)).unwrap() + 1;
        assert_eq!(usize::try_from(decl.line()).unwrap(), line, "{name}");
    }
}
