//! `layer_limit!` with a resolver, a constant rate, an algorithm, a month and a shared limit; and with
//! what a layer's limit reads from the request (exempt, tier) and its response (count).
#![deny(warnings)]

use redis_ratelimit::{
    Header, Ip, Limit, RateLimitLayer, RateLimitMiddleware, RequestContext, Tier,
    http::StatusCode, layer_limit,
};

const PRO: Tier = Tier::new("pro", Limit::per_minute(6000));
const PRO_MONTH: Tier = Tier::new("pro-month", Limit::per_month(1_000_000));

fn is_health_check(request: &RequestContext) -> bool {
    request.path() == Some("/health")
}

const PER_MINUTE: u32 = 600;

fn main() {
    let _axum = RateLimitLayer::new()
        .limit(layer_limit!(name = "api", replenish = PER_MINUTE, unit = "minute", key = Ip))
        .limit(layer_limit!(
            name = "tenants",
            replenish = 10,
            algorithm = "sliding_window",
            key = Header("x-tenant"),
            policy = "allow"
        ));
    let _actix = RateLimitMiddleware::new().limit(layer_limit!(shared = "api", key = Ip));
    // A monthly quota over a whole router, with a plan's tier by calendar period too.
    let _quota = RateLimitLayer::new().limit(layer_limit!(
        name = "monthly",
        replenish = 100000,
        unit = "month",
        key = Header("x-api-key"),
        tier = |request| request.headers().contains_key("x-pro").then_some(PRO_MONTH),
        tiers = [PRO_MONTH]
    ));
    let _features = RateLimitLayer::new().limit(layer_limit!(
        name = "plans",
        replenish = 60,
        unit = "minute",
        key = Header("x-api-key"),
        exempt = is_health_check,
        tier = |request| request.headers().contains_key("x-pro").then_some(PRO),
        tiers = [PRO],
        count = StatusCode::is_server_error
    ));
}
