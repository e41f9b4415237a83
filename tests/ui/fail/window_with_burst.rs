use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, burst = 50, algorithm = "fixed_window")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
