//! A small API behind rate limits, on axum.
//!
//! | route | limit | key |
//! |---|---|---|
//! | `POST /login` | 5 per minute | client IP |
//! | `GET /orders` | 3 per minute, bursts of 300 | user (the `x-user` header, via a tiny auth middleware) |
//! | `GET /search` | 100 per second | one bucket for everybody |
//! | `GET /users/{id}` | 10 per minute | the route: `/users/1` and `/users/2` share a bucket |
//! | `GET /items/{id}` | 10 per minute | the path: `/items/1` and `/items/2` are two buckets |
//! | `GET /health` | none | |
//! | `GET /metrics` | none | the library's metrics in Prometheus' text format |
//!
//! `TRUSTED_PROXIES` (comma-separated CIDRs) makes the client IP come from the header those
//! proxies write, when the peer is one of them: `X-Forwarded-For`, or the one named by
//! `TRUSTED_PROXY_HEADER` (`forwarded`, `x-real-ip`, `cf-connecting-ip`, ...). By default
//! every forwarding header is ignored.
//!
//! ```sh
//! cargo run --example axum_server --features axum                        # in memory
//! REDIS_URL=redis://127.0.0.1:6379 PORT=8080 cargo run --example axum_server --features axum
//! RUST_LOG=redis_ratelimit=debug cargo run --example axum_server --features axum  # spans
//! curl -i -H 'x-user: alice' localhost:3000/orders
//! ```
#![allow(clippy::print_stdout)]

mod reload;
mod report;
mod serve_axum;
mod service;

use std::process::ExitCode;

use axum::extract::{Path, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redis_ratelimit::{
    Global, Ip, RateLimitLayer, RateLimited, Route, TrustedProxies, Uri, User, key::Principal,
    rate_limit,
};
use serde_json::{Value, json};

/// The API's error type: a rejection by a rate limit is one of its cases.
#[derive(Debug)]
enum ApiError {
    RateLimited(RateLimited),
}

impl From<RateLimited> for ApiError {
    fn from(rejection: RateLimited) -> Self {
        ApiError::RateLimited(rejection)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            // 429 with Retry-After, the rate-limit headers and a problem+json body.
            ApiError::RateLimited(rejection) => rejection.into_response(),
        }
    }
}

#[rate_limit(replenish = 5, unit = "minute", key = Ip)]
async fn login() -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "token": "t-123" })))
}

#[rate_limit(replenish = 3, burst = 300, unit = "minute", key = User)]
async fn list_orders() -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "orders": [1, 2, 3] })))
}

#[rate_limit(replenish = 100, key = Global)]
async fn search() -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "results": [] })))
}

#[rate_limit(replenish = 10, unit = "minute", key = Route)]
async fn get_user() -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "user": "someone" })))
}

#[rate_limit(replenish = 10, unit = "minute", key = Uri)]
async fn get_item() -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "item": "something" })))
}

/// A download: every spelling of one file's path (`/files/a/b`, `/files/a%2Fb`) shares its
/// bucket, since the handler sees the same `path` for each.
#[rate_limit(replenish = 2, unit = "minute", key = Uri)]
async fn get_file(Path(path): Path<String>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "file": path })))
}

async fn health() -> StatusCode {
    StatusCode::OK
}

/// Stands in for real authentication: whoever the `x-user` header names is the user.
async fn auth(mut req: Request, next: Next) -> Response {
    let user = req
        .headers()
        .get("x-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(user) = user {
        req.extensions_mut().insert(Principal(user));
    }
    next.run(req).await
}

fn app(proxies: TrustedProxies, metrics: PrometheusHandle) -> Router {
    Router::new()
        // Decisions per limit and outcome, store latency, degraded mode (the `metrics`
        // feature), for Prometheus to scrape.
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .route("/login", post(login))
        .route("/orders", get(list_orders))
        .route("/search", get(search))
        .route("/users/{id}", get(get_user))
        .route("/items/{id}", get(get_item))
        .route("/files/{*path}", get(get_file))
        .route("/health", get(health))
        // Layers run outside in: auth (added last) runs first, so the rate-limit layer sees the
        // principal it put in the request's extensions.
        .layer(RateLimitLayer::new().trusted_proxies(proxies))
        .layer(middleware::from_fn(auth))
}

#[tokio::main]
async fn main() -> ExitCode {
    report::logs();
    report::exit(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // Before the first decision, so that every one is counted.
    let metrics = PrometheusBuilder::new().install_recorder()?;
    service::enable().await?;
    // `kill -HUP <pid>` re-reads the overrides (RATE_LIMIT_CONFIG) without a restart.
    reload::on_sighup()?;

    // TRUSTED_PROXIES and TRUSTED_PROXY_HEADER.
    let proxies = TrustedProxies::from_env()?;
    serve_axum::serve(app(proxies, metrics)).await
}
