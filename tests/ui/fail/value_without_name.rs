use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(3)]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
