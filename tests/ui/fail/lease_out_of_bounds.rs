use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(concurrent = 2, lease = "0ms")]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
