//! A loop of calls through one limit, printing every decision.
//!
//! ```sh
//! cargo run --example quickstart                                 # in-memory store
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart  # shared buckets in Redis
//! ```

#![allow(clippy::print_stdout)]

use std::time::Duration;

use redis_ratelimit::{Limit, RateLimiter};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let builder = RateLimiter::builder().prefix("quickstart");
    let limiter = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            println!("store: Redis at {url}");
            builder.redis(url).build().await?
        }
        _ => {
            println!("store: in memory (set REDIS_URL to share buckets through Redis)");
            builder.memory().build().await?
        }
    };

    // 2 calls per second on average, up to 5 at once.
    let limit = Limit::per_second(2).burst(5);
    println!("limit: {limit}");
    for call in 1..=12 {
        let d = limiter.check("user:42", &limit).await?;
        if d.allowed {
            println!("call {call:>2}: allowed, {} left", d.remaining);
        } else {
            println!("call {call:>2}: denied, retry in {:?}", d.retry_after);
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    Ok(())
}
