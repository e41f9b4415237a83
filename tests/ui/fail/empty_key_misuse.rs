use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, empty_key = "maybe", empty_key_status = 200)]
async fn call() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
