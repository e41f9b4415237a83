//! A router-wide limit on the actix-web middleware (`layer_limit!`), in memory: on the whole
//! app and on a `scope`, decided before the handler, and all or nothing with a handler's own
//! `#[rate_limit]`. One test for the file: the limiter is a process-wide static. The axum
//! layer, on a real `redis-server`, is in `tests/layer_limit.rs`.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::dev::ServiceResponse;
use actix_web::{App, test, web};
use redis_ratelimit::{
    Global, Ip, Limit, RateLimitMiddleware, RateLimited, RateLimiter, enable_redis_rate_limit,
    layer_limit, rate_limit,
};

mod support;

static REPORTS_RAN: AtomicUsize = AtomicUsize::new(0);
static STATS_RAN: AtomicUsize = AtomicUsize::new(0);

/// One report a day in all, on top of the app's limit.
#[rate_limit(replenish = 1, unit = "day", key = Global, name = "reports")]
async fn report() -> Result<&'static str, RateLimited> {
    REPORTS_RAN.fetch_add(1, Ordering::SeqCst);
    Ok("report")
}

async fn stats() -> &'static str {
    STATS_RAN.fetch_add(1, Ordering::SeqCst);
    "stats"
}

fn header<B>(response: &ServiceResponse<B>, name: &str) -> String {
    response
        .headers()
        .get_all(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

async fn left(limiter: &RateLimiter, name: &str, client: &str, limit: Limit) -> u64 {
    limiter
        .peek_named(name, client, &limit)
        .await
        .unwrap()
        .remaining
}

#[actix_web::test]
async fn the_middleware_decides_its_limits_before_the_handler_and_with_its_limits() {
    let limiter = enable_redis_rate_limit!(url = "memory://", prefix = "layer-actix")
        .await
        .unwrap();
    let app = test::init_service(
        App::new()
            .wrap(RateLimitMiddleware::new().limit(layer_limit!(
                name = "site",
                replenish = 5,
                unit = "day",
                key = Ip
            )))
            .route("/report", web::get().to(report))
            .service(
                web::scope("/admin")
                    .wrap(RateLimitMiddleware::new().limit(layer_limit!(
                        name = "staff",
                        replenish = 1,
                        unit = "day",
                        key = Ip
                    )))
                    .route("/stats", web::get().to(stats)),
            ),
    )
    .await;
    let site = |l| left(limiter, "site", "203.0.113.1", l);
    let a = "203.0.113.1";

    // The first request of a route: the middleware first, then the handler's own.
    let ok = support::actix_get!(app, a, "/report");
    assert_eq!(ok.status(), 200);
    assert_eq!(site(Limit::per_day(5)).await, 4);
    // Learned: one decision for both; `reports` refuses, and `site` takes nothing.
    let refused = support::actix_get!(app, a, "/report");
    assert_eq!(refused.status(), 429);
    assert!(
        header(&refused, "ratelimit").contains("\"reports\""),
        "{refused:?}"
    );
    assert_eq!(site(Limit::per_day(5)).await, 4);
    assert_eq!(REPORTS_RAN.load(Ordering::SeqCst), 1);

    // The scope's limit with the app's: all or nothing once the app's middleware has learned
    // that the scope's decides below it.
    assert_eq!(support::actix_get!(app, a, "/admin/stats").status(), 200);
    assert_eq!(site(Limit::per_day(5)).await, 3);
    for _ in 0..3 {
        let refused = support::actix_get!(app, a, "/admin/stats");
        assert_eq!(refused.status(), 429);
        assert!(
            header(&refused, "ratelimit").contains("\"staff\""),
            "{refused:?}"
        );
    }
    assert_eq!(site(Limit::per_day(5)).await, 3);
    assert_eq!(STATS_RAN.load(Ordering::SeqCst), 1);

    // The app's limit alone refuses, before any handler: a route without limits of its own
    // (no route at all here: the middleware decides first, every time) spends it.
    let b = "203.0.113.2";
    for _ in 0..5 {
        assert_eq!(support::actix_get!(app, b, "/nowhere").status(), 404);
    }
    let refused = support::actix_get!(app, b, "/nowhere");
    assert_eq!(refused.status(), 429);
    assert!(
        header(&refused, "ratelimit").contains("\"site\""),
        "{refused:?}"
    );
    let refused = support::actix_get!(app, b, "/report");
    assert_eq!(refused.status(), 429);
    assert_eq!(REPORTS_RAN.load(Ordering::SeqCst), 1);
    assert_eq!(left(limiter, "site", b, Limit::per_day(5)).await, 0);
}
