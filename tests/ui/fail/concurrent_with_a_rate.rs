use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(concurrent = 2, replenish = 5, key = redis_ratelimit::Global)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
