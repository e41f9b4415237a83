//! The `main` of the guide's first page, as a user following it writes it: it returns
//! `Box<dyn Error>`, so the standard library prints a failed start as `Error: {:?}`.
//! `e2e/tests/main_error.rs` runs it with a bad override and reads what a user would see.

use redis_ratelimit::{RateLimited, User, enable_redis_rate_limit, rate_limit};

// Declared for the override to name; this program serves nothing.
#[allow(dead_code)]
#[rate_limit(replenish = 3, burst = 300, unit = "minute", key = User)]
async fn list_orders() -> Result<Vec<u64>, RateLimited> {
    Ok(vec![1, 2, 3])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    enable_redis_rate_limit!().await?; // REDIS_URL, else redis://127.0.0.1:6379
    Ok(())
}
