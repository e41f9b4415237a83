use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, refill = "greedy")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
