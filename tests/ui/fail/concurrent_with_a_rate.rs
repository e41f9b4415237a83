use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(concurrent = 2, unit = "minute", key = redis_ratelimit::Global)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
