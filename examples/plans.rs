//! An API sold in plans, on axum: limits that depend on the call (issue 24).
//!
//! | route | limit | key | per call |
//! |---|---|---|---|
//! | `GET /search` | free: 3 per hour, pro: 6 per hour | the caller (`x-api-key`) | the caller's plan is the tier |
//! | `POST /upload/{tenant}` | 10 KiB per hour, bursts of 10 KiB | the tenant in the path | the cost is the body's size in KiB, rounded up |
//! | `POST /login` | 3 failed logins per user per hour | the user in the JSON body | only failures count |
//! | `GET /health` | none | | |
//!
//! The callers are a fixed table: the API key `free-1` is a caller on the free plan, `pro-1`
//! one on the pro plan; any other key, or none, is refused with 401 before any limit. The
//! users are fixed too: `ann` with the password `ann-secret`, `bob` with `bob-secret`.
//!
//! An upload larger than the burst (above 10 KiB) can never pass, whatever the wait: it is
//! refused at once with 413 and no `Retry-After`. The body is read before its cost is known,
//! so axum's body limit (2 MB by default) is what bounds it.
//!
//! A successful login gives its token back, through the store: every instance on the same
//! Redis sees it. Once three have failed, the limit refuses the user's next attempts, right
//! password or not, until a token comes back (one every 20 minutes). An empty user name is
//! refused with 401.
//!
//! Without `REDIS_URL` the limits live in memory (one instance only).
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 PORT=8080 \
//!     cargo run -p redis-ratelimit-examples --example plans --features axum
//! curl -i -H 'x-api-key: free-1' localhost:8080/search
//! curl -i --data-binary @some-file localhost:8080/upload/acme
//! curl -i -H 'content-type: application/json' -d '{"user":"ann","password":"nope"}' localhost:8080/login
//! ```
#![allow(clippy::print_stdout)]

mod api_keys;
mod report;
mod serve_axum;
mod service;

use std::process::ExitCode;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use redis_ratelimit::{Limit, RateLimitLayer, RateLimited, Tier, rate_limit};
use serde::Deserialize;
use serde_json::{Value, json};

const FREE: Tier = Tier::new("free", Limit::per_hour(3));
const PRO: Tier = Tier::new("pro", Limit::per_hour(6));

/// What a caller pays for.
#[derive(Debug, Clone, Copy)]
enum Plan {
    Free,
    Pro,
}

impl Plan {
    fn tier(self) -> Tier {
        match self {
            Plan::Free => FREE,
            Plan::Pro => PRO,
        }
    }
}

/// Who calls, from the `x-api-key` header; an unknown key is refused with 401.
#[derive(Debug)]
struct Caller {
    id: &'static str,
    plan: Plan,
}

/// The API keys this service knows (a real one would look them up).
const CALLERS: &[(&str, Plan)] = &[("free-1", Plan::Free), ("pro-1", Plan::Pro)];

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = (StatusCode, Json<Value>);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let (id, plan) = api_keys::caller(parts, CALLERS)?;
        Ok(Caller { id, plan })
    }
}

/// Three searches an hour on the free plan, six on pro, per caller. Every caller has a plan,
/// so the declared rate (the free plan's) is never used as such; `tiers` lists the plans for
/// the declaration (`declared_limits()`, the CLI).
#[rate_limit(
    replenish = 3,
    unit = "hour",
    key = caller.id,
    tier = caller.plan.tier(),
    tiers = [FREE, PRO]
)]
async fn search(caller: Caller) -> Result<Json<Value>, RateLimited> {
    Ok(Json(json!({ "caller": caller.id, "results": [] })))
}

/// A tenant's uploads: 10 KiB an hour, each upload costing its size in KiB, rounded up (an
/// empty one costs nothing).
#[rate_limit(
    replenish = 10,
    unit = "hour",
    key = tenant,
    cost = body.len().div_ceil(1024)
)]
async fn upload(Path(tenant): Path<String>, body: Bytes) -> Result<Json<Value>, RateLimited> {
    Ok(Json(json!({ "tenant": tenant, "bytes": body.len() })))
}

#[derive(Debug, Deserialize)]
struct Credentials {
    user: String,
    password: String,
}

/// The users and their passwords (a real service would check a hash).
const USERS: &[(&str, &str)] = &[("ann", "ann-secret"), ("bob", "bob-secret")];

/// The login's error type: a wrong password, or a rejection by the rate limit.
#[derive(Debug)]
enum LoginError {
    WrongPassword,
    RateLimited(RateLimited),
}

impl From<RateLimited> for LoginError {
    fn from(rejection: RateLimited) -> Self {
        LoginError::RateLimited(rejection)
    }
}

impl IntoResponse for LoginError {
    fn into_response(self) -> Response {
        match self {
            LoginError::WrongPassword => (
                StatusCode::UNAUTHORIZED,
                Json(json!({ "error": "wrong user or password" })),
            )
                .into_response(),
            // 429 with Retry-After, the rate-limit headers and a problem+json body.
            LoginError::RateLimited(rejection) => rejection.into_response(),
        }
    }
}

/// Three failed logins per user per hour: a successful one gives its token back. An empty user
/// name is no key: refused (the limiter's policy for a missing key) with 401, as a caller who
/// did not say who they are, where the default status would be 403.
#[rate_limit(
    replenish = 3,
    unit = "hour",
    key = user,
    count = Result::is_err,
    empty_key_status = 401
)]
async fn login(
    Json(Credentials { user, password }): Json<Credentials>,
) -> Result<Json<Value>, LoginError> {
    if USERS.contains(&(user.as_str(), password.as_str())) {
        Ok(Json(json!({ "token": format!("t-{user}") })))
    } else {
        Err(LoginError::WrongPassword)
    }
}

async fn health() -> StatusCode {
    StatusCode::OK
}

fn app() -> Router {
    Router::new()
        .route("/search", get(search))
        .route("/upload/{tenant}", post(upload))
        .route("/login", post(login))
        .route("/health", get(health))
        // Puts the rate-limit headers on every response of a limited handler.
        .layer(RateLimitLayer::new())
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
