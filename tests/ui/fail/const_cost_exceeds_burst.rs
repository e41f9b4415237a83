use redis_ratelimit::{RateLimited, rate_limit};

const ORDERS_PER_MINUTE: u32 = 10;
const EXPORT_COST: u32 = 50;

#[rate_limit(replenish = ORDERS_PER_MINUTE, unit = "minute", cost = EXPORT_COST)]
async fn export_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
