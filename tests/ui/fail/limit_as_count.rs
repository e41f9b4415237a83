use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(limit = 5, unit = "minute")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
