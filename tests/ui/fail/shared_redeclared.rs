use redis_ratelimit::{Ip, RateLimited, rate_limit};

#[rate_limit(shared = "search", replenish = 10, unit = "minute", key = Ip)]
async fn suggest() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
