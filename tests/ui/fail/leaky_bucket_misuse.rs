use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, burst = 5, algorithm = "leaky_bucket", refill = "interval")]
async fn with_a_refill() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, burst = 5, algorithm = "leaky_bucket", initial = 0)]
async fn with_an_initial_fill() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, algorithm = "leaky")]
async fn misspelt() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
