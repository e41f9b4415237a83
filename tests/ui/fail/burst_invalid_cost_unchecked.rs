use redis_ratelimit::{RateLimited, rate_limit};

// Only `burst` is reported: `cost` is not compared with a burst that was refused.
#[rate_limit(replenish = 10, burst = 0, cost = 11)]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
