use redis_ratelimit::{RateLimited, rate_limit};

const ORDERS_PER_MINUTE: u64 = 10;

#[rate_limit(replenish = ORDERS_PER_MINUTE, unit = "minute")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
