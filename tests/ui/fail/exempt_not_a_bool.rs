use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, key = caller, exempt = caller)]
async fn call(caller: &str) -> Result<usize, RateLimited> {
    Ok(caller.len())
}

fn main() {}
