use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 0, unit = "fortnight", frobnicate = 1)]
fn list_orders() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
