use redis_ratelimit::{RateLimited, rate_limit};

const WARM: u32 = 21;

#[rate_limit(replenish = 10, burst = 20, initial = WARM)]
async fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
