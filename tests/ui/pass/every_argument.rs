use std::sync::OnceLock;

use redis_ratelimit::{RateLimited, RateLimiter, Uri, rate_limit};

static LIMITER: OnceLock<RateLimiter> = OnceLock::new();

#[rate_limit(
    replenish = 3,
    burst = 300,
    unit = "minute",
    key = Uri,
    cost = 2,
    name = "orders.list",
    limiter = LIMITER,
    policy = "deny",
)]
async fn list_orders() -> Result<Vec<u64>, RateLimited> {
    Ok(vec![1, 2, 3])
}

fn main() {
    let _ = list_orders;
}
