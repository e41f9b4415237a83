use redis_ratelimit::{RateLimited, rate_limit};

// Each stacked attribute's errors are reported on it, all in one compile.
#[rate_limit(replenish = 10)]
#[rate_limit(burst = 20, unit = "day")]
#[rate_limit(replenish = 0, unit = "hour", bursts = 3)]
#[rate_limit = "minute"]
async fn search() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
