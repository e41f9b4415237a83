use redis_ratelimit::{RateLimited, rate_limit};

static LIMITER: &str = "redis://127.0.0.1";

#[rate_limit(replenish = 10, limiter = LIMITER)]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
