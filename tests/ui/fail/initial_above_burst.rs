use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, burst = 20, initial = 21)]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
