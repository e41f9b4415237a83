use std::sync::OnceLock;

use redis_ratelimit::{RateLimited, RateLimiter, rate_limit};

static EDGE: OnceLock<RateLimiter> = OnceLock::new();
static CORE: OnceLock<RateLimiter> = OnceLock::new();

#[rate_limit(replenish = 10, limiter = EDGE)]
#[rate_limit(replenish = 100, key = redis_ratelimit::Global, limiter = CORE)]
async fn search() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let _ = (&EDGE, &CORE);
}
