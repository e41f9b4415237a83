use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(concurrent = 0)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
