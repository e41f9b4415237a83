use redis_ratelimit::{Global, RateLimited, rate_limit};

// A sliding window cannot owe: there is no debt to bound.
#[rate_limit(replenish = 10, key = Global, algorithm = "sliding_window", max_debt = 5)]
async fn logged() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
