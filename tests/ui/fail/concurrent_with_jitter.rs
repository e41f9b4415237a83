use redis_ratelimit::{RateLimited, rate_limit};

// A slot's waiters are woken by its release, not at a turn a jitter could spread.
#[rate_limit(concurrent = 2, key = redis_ratelimit::Global, wait = "1s", jitter = "50ms")]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
