//! The same API as `axum_server` (see its table of routes and limits), on actix-web.
//!
//! ```sh
//! cargo run --example actix_server --features actix-web
//! REDIS_URL=redis://127.0.0.1:6379 PORT=8080 cargo run --example actix_server --features actix-web
//! RUST_LOG=redis_ratelimit=debug cargo run --example actix_server --features actix-web  # spans
//! ```
#![allow(clippy::print_stdout)]

mod reload;
mod report;
mod service;

use std::process::ExitCode;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::{App, HttpMessage, HttpResponse, HttpServer, ResponseError, web};
use redis_ratelimit::{
    Global, Ip, RateLimitMiddleware, RateLimited, Route, TrustedProxies, Uri, User, key::Principal,
    rate_limit,
};
use serde_json::json;

/// The API's error type: a rejection by a rate limit is one of its cases.
#[derive(Debug)]
enum ApiError {
    RateLimited(RateLimited),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::RateLimited(r) => r.fmt(f),
        }
    }
}

impl From<RateLimited> for ApiError {
    fn from(rejection: RateLimited) -> Self {
        ApiError::RateLimited(rejection)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::RateLimited(r) => r.status_code(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            // 429 with Retry-After, the rate-limit headers and a problem+json body.
            ApiError::RateLimited(r) => r.error_response(),
        }
    }
}

#[rate_limit(replenish = 5, unit = "minute", key = Ip)]
async fn login() -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(json!({ "token": "t-123" })))
}

#[rate_limit(replenish = 3, burst = 300, unit = "minute", key = User)]
async fn list_orders() -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(json!({ "orders": [1, 2, 3] })))
}

#[rate_limit(replenish = 100, key = Global)]
async fn search() -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(json!({ "results": [] })))
}

#[rate_limit(replenish = 10, unit = "minute", key = Route)]
async fn get_user() -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(json!({ "user": "someone" })))
}

#[rate_limit(replenish = 10, unit = "minute", key = Uri)]
async fn get_item() -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(json!({ "item": "something" })))
}

/// A download: every spelling of one file's path (`/files/a/b`, `/files/a%2Fb`) shares its
/// bucket, since the handler sees the same `path` for each.
#[rate_limit(replenish = 2, unit = "minute", key = Uri)]
async fn get_file(path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(json!({ "file": path.into_inner() })))
}

async fn health() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Stands in for real authentication: whoever the `x-user` header names is the user.
async fn auth<B: MessageBody>(
    req: ServiceRequest,
    next: actix_web::middleware::Next<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    let user = req
        .headers()
        .get("x-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(user) = user {
        req.extensions_mut().insert(Principal(user));
    }
    next.call(req).await
}

#[actix_web::main]
async fn main() -> ExitCode {
    report::logs();
    report::exit(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    service::enable().await?;
    // `kill -HUP <pid>` re-reads the overrides (RATE_LIMIT_CONFIG) without a restart.
    reload::on_sighup()?;

    // TRUSTED_PROXIES and TRUSTED_PROXY_HEADER.
    let proxies = TrustedProxies::from_env()?;
    let port = service::port();
    let server = HttpServer::new(move || {
        App::new()
            // The last `wrap` runs first: auth puts the principal in the extensions, then the
            // rate-limit middleware records the request for the handlers.
            .wrap(RateLimitMiddleware::new().trusted_proxies(proxies.clone()))
            .wrap(actix_web::middleware::from_fn(auth))
            .route("/login", web::post().to(login))
            .route("/orders", web::get().to(list_orders))
            .route("/search", web::get().to(search))
            .route("/users/{id}", web::get().to(get_user))
            .route("/items/{id}", web::get().to(get_item))
            .route("/files/{path:.*}", web::get().to(get_file))
            .route("/health", web::get().to(health))
    })
    .workers(2)
    // A client that closes its connection ends its request (its handler's future is dropped),
    // as on axum; actix-web's default runs the handler on for nobody (the guide, "When a
    // client goes away").
    .h1_allow_half_closed(false)
    .bind(("127.0.0.1", port))?;
    println!("listening on http://{}", server.addrs()[0]);
    server.run().await?;
    Ok(())
}
