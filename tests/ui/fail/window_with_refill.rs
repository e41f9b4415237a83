use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, algorithm = "sliding_log", refill = "interval")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
