use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(concurrent = 2000000)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
