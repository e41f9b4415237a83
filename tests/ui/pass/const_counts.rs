use redis_ratelimit::{RateLimited, rate_limit};

const ORDERS_PER_MINUTE: u32 = 3;
const ORDERS_BURST: u32 = 300;

mod limits {
    pub const EXPORT_COST: u32 = 5;
}

#[rate_limit(replenish = ORDERS_PER_MINUTE, burst = ORDERS_BURST, unit = "minute")]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, burst = 2 * ORDERS_PER_MINUTE + 4, cost = limits::EXPORT_COST)]
async fn export_orders() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10u32, burst = 1_000)]
async fn suffixed() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let _ = (list_orders, export_orders, suffixed);
}
