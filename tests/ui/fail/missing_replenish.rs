use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(burst = 20, unit = "minute")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
