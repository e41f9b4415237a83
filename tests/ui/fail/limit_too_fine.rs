use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 1_000_003, burst = 4_000_000_000, unit = "day")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
