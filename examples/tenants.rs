//! A multi-tenant API on axum: limits beyond one handler (issue 25).
//!
//! | route | limit | key |
//! |---|---|---|
//! | every route | 60 requests a minute (`tenants::per_ip`, on the router's layer) | the client's IP |
//! | `GET /search`, `GET /suggest` | 5 a minute between them (`search`, declared on `search`, shared by `suggest`) | the client's IP |
//! | `POST /reports/{tenant}` | 2 runs at once (`reports`, a concurrency limit) | the tenant in the path |
//! | `GET /health` | the router's only | |
//!
//! A report runs for `?ms=` milliseconds (at most 10 s, 200 by default), holding one of its
//! tenant's two slots the while: a third report of the tenant, on any instance, is refused at
//! once with 429 and `RateLimit-Policy: "reports";q=2;qu="concurrent-requests"`. The slot comes
//! back when the report ends; when the client closes its connection (hyper, under axum, then
//! drops the request's future: on actix-web that takes `HttpServer::h1_allow_half_closed(false)`,
//! see the guide's "When a client goes away"); or, if the instance dies, when its lease of 5 s
//! runs out. A client that vanishes without closing its connection holds the slot until the
//! report ends (at most the 10 s a report may run).
//!
//! A request a handler refuses takes nothing from the router's limit, and one the router's
//! limit refuses never reaches the handler: the router's limit and the handler's are decided
//! together, in one round trip, once the layer has seen the route's handler check.
//!
//! Without `REDIS_URL` the limits live in memory (one instance only).
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 PORT=8080 \
//!     cargo run -p redis-ratelimit-examples --example tenants --features axum
//! curl -i 'localhost:8080/search?q=shoes'
//! curl -i 'localhost:8080/suggest?q=sho'
//! curl -i -X POST 'localhost:8080/reports/acme?ms=5000' &   # three at once: the third is refused
//! ```
#![allow(clippy::print_stdout)]

mod report;
mod serve_axum;
mod service;

use std::process::ExitCode;
use std::time::Duration;

use axum::extract::{Path, Query};
use axum::routing::{get, post};
use axum::{Json, Router};
use redis_ratelimit::{Ip, RateLimitLayer, RateLimited, layer_limit, rate_limit};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
struct Search {
    #[serde(default)]
    q: String,
}

/// Five searches a minute per client, suggestions included.
#[rate_limit(replenish = 5, unit = "minute", key = Ip, name = "search")]
async fn search(Query(Search { q }): Query<Search>) -> Result<Json<Value>, RateLimited> {
    Ok(Json(json!({ "query": q, "results": [] })))
}

/// Draws from the searches: a suggestion is a search.
#[rate_limit(shared = "search", key = Ip)]
async fn suggest(Query(Search { q }): Query<Search>) -> Result<Json<Value>, RateLimited> {
    Ok(Json(json!({ "prefix": q, "suggestions": [] })))
}

#[derive(Debug, Deserialize)]
struct Run {
    ms: Option<u64>,
}

/// Two reports of a tenant at once, across every instance; the slot is held while this runs,
/// its lease of 5 s renewed the while: an instance that dies loses its slots 5 s later.
#[rate_limit(concurrent = 2, lease = "5s", key = tenant, name = "reports")]
async fn run_report(
    Path(tenant): Path<String>,
    Query(Run { ms }): Query<Run>,
) -> Result<Json<Value>, RateLimited> {
    let ms = ms.unwrap_or(200).min(10_000);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(Json(json!({ "tenant": tenant, "ran_ms": ms })))
}

async fn health() -> &'static str {
    "ok"
}

fn app() -> Router {
    Router::new()
        .route("/search", get(search))
        .route("/suggest", get(suggest))
        .route("/reports/{tenant}", post(run_report))
        .route("/health", get(health))
        // Every route: 60 requests a minute per client, with the handlers' own limits.
        .layer(RateLimitLayer::new().limit(layer_limit!(
            name = "tenants::per_ip",
            replenish = 60,
            unit = "minute",
            key = Ip
        )))
}

#[tokio::main]
async fn main() -> ExitCode {
    report::logs();
    report::exit(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    service::enable().await?;
    serve_axum::serve(app()).await
}
