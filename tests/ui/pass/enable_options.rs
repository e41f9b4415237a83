use std::time::Duration;

use redis_ratelimit::{RateLimiter, enable_redis_rate_limit};

async fn defaults() -> Result<&'static RateLimiter, redis_ratelimit::Error> {
    enable_redis_rate_limit!().await
}

async fn every_option() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("MY_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let limiter = enable_redis_rate_limit!(
        url = url,
        prefix = "orders",
        policy = "deny",
        empty_key = "allow",
        deadline_ms = 20,
        config = "ratelimit.toml",
    )
    .await?;
    let _: &RateLimiter = limiter;
    Ok(())
}

async fn other_policies() -> Result<(), redis_ratelimit::Error> {
    enable_redis_rate_limit!(policy = "fallback", empty_key = "deny").await?;
    enable_redis_rate_limit!(
        policy = "allow",
        deadline_ms = Duration::from_secs(1).as_millis() as u64
    )
    .await?;
    Ok(())
}

fn main() {
    let _ = (defaults, every_option, other_policies);
}
