use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, unit = "minute")]
#[rate_limit(concurrent = 2, name = "exports")]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
