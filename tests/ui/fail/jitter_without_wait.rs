use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, jitter = "50ms")]
async fn no_wait() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, wait = "1s", jitter = "61m")]
async fn too_long() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, wait = "1s", jitter = "2h")]
async fn unknown_unit() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
