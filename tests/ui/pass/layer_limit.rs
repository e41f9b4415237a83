//! `layer_limit!` with a resolver, a constant rate, an algorithm and a shared limit.
#![deny(warnings)]

use redis_ratelimit::{Header, Ip, RateLimitLayer, RateLimitMiddleware, layer_limit};

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
}
