use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, key = user, tier = plan)]
async fn search(user: &str, plan: &str) -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
