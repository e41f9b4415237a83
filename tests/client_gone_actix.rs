//! A client that goes away, on actix-web, over real HTTP/1.1 on a real `redis-server` (issue
//! 33): by default actix-web keeps running a request's handler after its client closed the
//! connection, so the concurrency slots the request holds stay taken until the handler
//! returns. The two ways docs/guide.md ("actix-web", "When a client goes away") gives to
//! bound that, each shown to give the slots back while the handler would still be running
//! (these handlers never return: only a dropped future ends them):
//!
//! - `HttpServer::h1_allow_half_closed(false)`: the server drops the request's future as soon
//!   as it reads the client's end of the connection, as hyper (axum) does;
//! - a deadline middleware (`tokio::time::timeout` around the rest of the app), for what the
//!   server cannot see: a client that vanished without closing, or HTTP/2, whose requests
//!   actix-web runs to their end whatever the client does.
//!
//! One test (one server, one limiter) for the file: the limiter is process-wide.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::{Next, from_fn};
use actix_web::{App, HttpServer, web};
use redis_ratelimit::{
    Global, Limit, RateLimitMiddleware, RateLimited, RateLimiter, enable_redis_rate_limit,
    layer_limit, rate_limit,
};
use testkit::RedisServer;
use testkit::wait::eventually_ok;
use tokio::io::AsyncWriteExt;

mod support;

/// Handlers that started, and handler futures that were dropped.
static STARTED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// Runs until its future is dropped: counts its start, and its drop.
async fn forever() {
    struct Dropped;
    impl Drop for Dropped {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }
    let _dropped = Dropped;
    STARTED.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
}

/// One export at a time, across the fleet: its slot is held while it runs.
#[rate_limit(concurrent = 1, key = Global, name = "exports")]
async fn export() -> Result<&'static str, RateLimited> {
    forever().await;
    Ok("exported")
}

/// A job under the scope's concurrency limit, which the middleware holds for the request.
async fn job() -> &'static str {
    forever().await;
    "done"
}

/// The guide's deadline: a request still running after `DEADLINE` is answered 503, its future
/// dropped, and with it the slots it holds.
async fn deadline(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    const DEADLINE: Duration = Duration::from_millis(300);
    actix_web::rt::time::timeout(DEADLINE, next.call(req))
        .await
        .map_err(|_| actix_web::error::ErrorServiceUnavailable("the request ran out of time"))?
}

/// The slots free under the concurrency limit `name`, as the store says.
async fn free(limiter: &RateLimiter, name: &str) -> u64 {
    limiter
        .peek_named(name, "global", &Limit::concurrent(1))
        .await
        .unwrap()
        .remaining
}

/// What a wait that ran out saw: the handlers started and the futures dropped.
fn counts() -> String {
    format!(
        "handlers started {}, futures dropped {}",
        STARTED.load(Ordering::SeqCst),
        DROPPED.load(Ordering::SeqCst),
    )
}

/// A client sends `GET path` to `server`, waits until its handler runs and holds the slot of
/// `limit`, and goes away (closes its connection); the slot must come back while the handler
/// would still be running, its future dropped.
async fn a_client_goes_away(limiter: &RateLimiter, server: SocketAddr, path: &str, limit: &str) {
    let (started, dropped) = (
        STARTED.load(Ordering::SeqCst),
        DROPPED.load(Ordering::SeqCst),
    );
    let mut client = tokio::net::TcpStream::connect(server).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: {server}\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    eventually_ok(format!("{path}: the handler runs"), async || {
        (STARTED.load(Ordering::SeqCst) > started)
            .then_some(())
            .ok_or_else(counts)
    })
    .await;
    assert_eq!(
        free(limiter, limit).await,
        0,
        "{path}: the request holds `{limit}`"
    );
    drop(client);
    eventually_ok(
        format!("{path}: the client left, and `{limit}` came back"),
        async || {
            (DROPPED.load(Ordering::SeqCst) > dropped && free(limiter, limit).await == 1)
                .then_some(())
                .ok_or_else(counts)
        },
    )
    .await;
}

#[actix_web::test]
async fn a_client_that_goes_away_gives_its_slots_back() {
    let redis = RedisServer::start();
    let limiter = enable_redis_rate_limit!(
        prefix = "client-gone",
        builder = RateLimiter::builder().redis(redis.url()).instance(false)
    )
    .await
    .unwrap();
    let app = |name: &'static str| {
        let jobs = match name {
            "jobs" => layer_limit!(name = "jobs", concurrent = 1, key = Global),
            _ => layer_limit!(name = "jobs_deadline", concurrent = 1, key = Global),
        };
        App::new()
            .wrap(RateLimitMiddleware::new())
            .route("/export", web::get().to(export))
            .service(
                web::scope("/jobs")
                    .wrap(RateLimitMiddleware::new().limit(jobs))
                    .route("/run", web::get().to(job)),
            )
    };

    // The server sees the client close its connection: it drops the request's future.
    let (half_closed_off, handle) =
        support::serve_actix!(HttpServer::new(move || app("jobs")).h1_allow_half_closed(false));
    for _ in 0..2 {
        a_client_goes_away(limiter, half_closed_off, "/export", "exports").await;
        a_client_goes_away(limiter, half_closed_off, "/jobs/run", "jobs").await;
    }
    handle.stop(false).await;

    // actix-web's default: the handler would run on; the deadline ends it.
    let (with_deadline, handle) = support::serve_actix!(HttpServer::new(move || app(
        "jobs_deadline"
    )
    .wrap(from_fn(deadline))));
    a_client_goes_away(limiter, with_deadline, "/jobs/run", "jobs_deadline").await;
    handle.stop(false).await;
}
