use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, lease = "10s")]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
