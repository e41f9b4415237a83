use redis_ratelimit::{Global, RateLimited, layer_limit, rate_limit};

// A sliding window cannot owe tokens.
#[rate_limit(replenish = 10, key = Global, algorithm = "sliding_window", settle = |_| 1u32)]
async fn logged() -> Result<(), RateLimited> {
    Ok(())
}

// Nor can an interval refill.
#[rate_limit(replenish = 10, key = Global, refill = "interval", settle = |_| 1u32)]
async fn hourly() -> Result<(), RateLimited> {
    Ok(())
}

// `count` and `settle` on one limit: one of them.
#[rate_limit(replenish = 10, key = Global, count = Result::is_err, settle = |_| 1u32)]
async fn both() -> Result<(), RateLimited> {
    Ok(())
}

// A concurrency slot holds no tokens to settle.
#[rate_limit(concurrent = 2, key = Global, settle = |_| 1u32)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    // A layer's response is settled from the handler.
    let _ = layer_limit!(name = "api", replenish = 10, key = Global, settle = |_| 1u32);
}
