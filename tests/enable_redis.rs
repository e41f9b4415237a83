//! `enable_redis_rate_limit!` against a real redis-server: a config file overrides a declared
//! limit, the global limiter decides annotated calls in Redis, and enabling twice fails.
//!
//! One test per file: enabling is once per process.
#![allow(clippy::unwrap_used)]

use redis::AsyncCommands;
use redis_ratelimit::{
    Error, Global, RateLimited, RequestContext, Source, context::scope, context::scope_returning,
    enable_redis_rate_limit, rate_limit,
};
use testkit::RedisServer;

#[rate_limit(replenish = 100, unit = "minute", key = Global)]
async fn orders() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, unit = "day", key = Global)]
async fn search() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_overrides_declared_limits_on_redis() {
    let server = RedisServer::start();
    let config = server.dir().join("limits.toml");
    std::fs::write(
        &config,
        "[limits.\"enable_redis::orders\"]\nburst = 2\n\n[limits.\"enable_redis::search\"]\nenabled = false\n",
    )
    .unwrap();

    let limiter = enable_redis_rate_limit!(
        url = server.url(),
        prefix = "er",
        deadline_ms = 5000,
        config = config.clone()
    )
    .await
    .unwrap();
    assert_eq!(limiter.prefix(), "er");

    let decl = redis_ratelimit::declared_limits()
        .into_iter()
        .find(|d| d.name() == "enable_redis::orders")
        .unwrap();
    assert_eq!(decl.declared_limit().burst_capacity(), 100);
    assert_eq!(decl.effective().limit.burst_capacity(), 2);

    // The override's burst of 2 holds, decided in Redis.
    assert!(scope(RequestContext::new(), orders()).await.is_ok());
    assert!(scope(RequestContext::new(), orders()).await.is_ok());
    let refused = scope(RequestContext::new(), orders()).await.unwrap_err();
    assert_eq!(refused.decision().source, Source::Store);
    let mut con = server.connection().await;
    let exists: bool = con
        .exists("er:{20:enable_redis::orders:global}")
        .await
        .unwrap();
    assert!(exists);

    // A disabled limit lets every call through without touching Redis, and says so wherever
    // it shows: its description and each call's decision (no quota, no headers).
    let search_decl = redis_ratelimit::declared_limits()
        .into_iter()
        .find(|d| d.name() == "enable_redis::search")
        .unwrap();
    assert_eq!(
        search_decl.effective().to_string(),
        "disabled (declared 1 per day (burst 1))"
    );
    assert_eq!(decl.effective().to_string(), "100 per minute (burst 2)");
    for _ in 0..5 {
        let (result, recorded) = scope_returning(RequestContext::new(), search()).await;
        assert!(result.is_ok());
        let d = recorded.expect("the decision is recorded").decision;
        assert_eq!((d.source, d.remaining), (Source::Disabled, u64::MAX));
    }
    let exists: bool = con
        .exists("er:{20:enable_redis::search:global}")
        .await
        .unwrap();
    assert!(!exists);

    // Enabling again is an error, not a silent replacement.
    let again = enable_redis_rate_limit!(url = server.url())
        .await
        .unwrap_err();
    assert!(matches!(again, Error::AlreadyEnabled), "{again}");
}
