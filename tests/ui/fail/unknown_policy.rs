use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, policy = "fail-closed")]
async fn pay() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, policy = deny)]
async fn refund() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
