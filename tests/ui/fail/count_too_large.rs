use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 5_000_000_000)]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
