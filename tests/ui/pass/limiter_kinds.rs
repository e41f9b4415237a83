use std::sync::{LazyLock, OnceLock};

use redis_ratelimit::{RateLimited, RateLimiter, rate_limit};

static ONCE: OnceLock<RateLimiter> = OnceLock::new();
static LAZY: LazyLock<RateLimiter> = LazyLock::new(|| unreachable!("not called in this test"));

struct Service {
    limiter: RateLimiter,
}

#[rate_limit(replenish = 10, limiter = ONCE)]
async fn with_once_lock() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, limiter = LAZY)]
async fn with_lazy_lock() -> Result<(), RateLimited> {
    Ok(())
}

impl Service {
    #[rate_limit(replenish = 10, limiter = self.limiter)]
    async fn with_own_limiter(&self) -> Result<(), RateLimited> {
        Ok(())
    }
}

fn main() {
    let _ = (with_once_lock, with_lazy_lock, Service::with_own_limiter);
}
