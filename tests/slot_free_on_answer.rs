//! A concurrency slot is free by the time the call's answer arrives, on a real `redis-server`:
//! a caller that gets its answer and calls again at once is admitted, however busy the
//! machine. The slot used to be given back in a task spawned when the function's future was
//! dropped, so a call made at once could reach Redis before the release did (found by an e2e
//! test on a loaded machine: a tenant's next report refused right after its last one ended).
//! On a current-thread runtime the race is certain without the fix: the spawned release runs
//! only after the next call has sent its script.

#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use redis_ratelimit::{Global, RateLimitLayer, RateLimited, RateLimiter, layer_limit, rate_limit};
use testkit::RedisServer;
use tower::ServiceExt as _;

mod support;

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

#[rate_limit(concurrent = 1, key = Global, limiter = LIMITER)]
async fn report() -> Result<(), RateLimited> {
    tokio::task::yield_now().await;
    Ok(())
}

#[rate_limit(shared = "slot_free_on_answer::report", key = Global, limiter = LIMITER)]
async fn report_again() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test(flavor = "current_thread")]
async fn a_function_s_slot_is_free_when_it_returns() {
    let server = RedisServer::start();
    let _ = LIMITER.set(support::redis_limiter(&server, "slot-free").await);
    for i in 0..50 {
        assert!(
            report().await.is_ok(),
            "call {i}: the last call's slot came back first"
        );
        assert!(report_again().await.is_ok(), "shared use {i}");
    }
}

/// The same through the axum layer's own concurrency limit: each response leaves once its
/// slot is back, so a client's next request, sent when the response arrives, runs.
#[tokio::test(flavor = "current_thread")]
async fn a_layer_s_slot_is_free_when_its_response_leaves() {
    let server = RedisServer::start();
    redis_ratelimit::enable_redis_rate_limit!(url = server.url())
        .await
        .unwrap();
    let app = Router::new()
        .route("/export", get(|| async { "done" }))
        .layer(RateLimitLayer::new().limit(layer_limit!(
            name = "exports",
            concurrent = 1,
            key = Global
        )));
    for i in 0..50 {
        let response = app
            .clone()
            .oneshot(Request::get("/export").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
    }
}
