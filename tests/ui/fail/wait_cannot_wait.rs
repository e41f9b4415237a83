use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, algorithm = "fixed_window", wait = "1s")]
async fn a_window() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, refill = "interval", wait = "1s")]
async fn an_interval_refill() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
