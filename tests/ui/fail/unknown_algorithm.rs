use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, algorithm = "leaky")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
