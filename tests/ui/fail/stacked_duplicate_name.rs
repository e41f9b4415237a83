use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, name = "search")]
#[rate_limit(replenish = 100, key = redis_ratelimit::Global, name = "search")]
async fn search() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
