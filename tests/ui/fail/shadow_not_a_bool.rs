use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, shadow = "yes")]
async fn a_string() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, shadow)]
async fn no_value() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
