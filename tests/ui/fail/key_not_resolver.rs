use redis_ratelimit::{RateLimited, rate_limit};

struct Tenant;

#[rate_limit(replenish = 10, key = Tenant)]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
