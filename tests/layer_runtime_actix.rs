//! A layer's limit built at run time from configuration (`LayerLimit::new`) on the actix-web
//! middleware, in memory: overridden by name, built before enable and after; listed by
//! `declared_limits()`; and the middleware's own refusals rendered by `on_rejection`, with
//! the rate-limit headers on them. One test for the file: the limiter is a process-wide
//! static. The axum layer, on both stores, is in `tests/layer_runtime.rs`.
#![allow(clippy::unwrap_used)]

use actix_web::dev::ServiceResponse;
use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, test, web};
use redis_ratelimit::http::LayerLimit;
use redis_ratelimit::{Ip, Limit, RateLimitMiddleware, declared_limits, enable_redis_rate_limit};

mod support;

async fn stats() -> &'static str {
    "stats"
}

fn header<B>(response: &ServiceResponse<B>, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// `[limits."<name>"]` at `n` a day (and as much burst).
fn override_of(name: &str, n: u32) -> String {
    format!("[limits.\"{name}\"]\nreplenish = {n}\nburst = {n}\nunit = \"day\"\n")
}

#[actix_web::test]
async fn a_limit_built_from_configuration_refuses_as_the_service_says() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, override_of("site", 2)).unwrap();

    // From the service's configuration, before enable: enable applies the override.
    let (name, per_day) = ("site", 1);
    let site = LayerLimit::new(name, Limit::per_day(per_day), Ip).unwrap();
    enable_redis_rate_limit!(
        url = "memory://",
        prefix = "layer-runtime-actix",
        config = &config
    )
    .await
    .unwrap();
    let decl = site.declaration();
    assert!(decl.is_built_at_run_time());
    assert!(decl.file().ends_with("layer_runtime_actix.rs"), "{decl:?}");
    assert_eq!(decl.effective().limit, Limit::per_day(2));
    assert!(declared_limits().iter().any(|d| std::ptr::eq(*d, decl)));

    let app = test::init_service(
        App::new()
            .wrap(
                RateLimitMiddleware::new()
                    .limit(site)
                    .on_rejection(|rejected| {
                        let status = StatusCode::from_u16(rejected.status().as_u16()).unwrap();
                        HttpResponse::build(status)
                            // Replaced by the one the limit renders.
                            .insert_header(("retry-after", "0"))
                            .insert_header(("x-refused-by", "config"))
                            .body(format!("refused: {}", status.as_u16()))
                    }),
            )
            .route("/stats", web::get().to(stats)),
    )
    .await;
    let a = "203.0.113.1";
    for _ in 0..2 {
        assert_eq!(support::actix_get!(app, a, "/stats").status(), 200);
    }
    let refused = support::actix_get!(app, a, "/stats");
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "x-refused-by"), "config");
    assert!(
        header(&refused, "ratelimit").contains("\"site\""),
        "{refused:?}"
    );
    assert!(
        header(&refused, "ratelimit-policy").contains("\"site\";q=2"),
        "{refused:?}"
    );
    assert_eq!(header(&refused, "x-ratelimit-remaining"), "0");
    let retry_after: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!(retry_after > 0, "{refused:?}");
    assert_eq!(test::read_body(refused).await, "refused: 429");

    // Built after enable: the override in force applies at once.
    std::fs::write(&config, override_of("site", 2) + &override_of("late", 3)).unwrap();
    let late = LayerLimit::new("late", Limit::per_day(1), Ip).unwrap();
    assert_eq!(late.declaration().effective().limit, Limit::per_day(3));
}
