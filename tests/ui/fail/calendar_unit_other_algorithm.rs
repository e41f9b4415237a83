use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10000, unit = "month", algorithm = "sliding_window")]
async fn monthly() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 100, unit = "week", burst = 200)]
async fn weekly() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
