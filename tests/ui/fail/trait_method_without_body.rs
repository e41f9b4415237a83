use redis_ratelimit::{RateLimited, rate_limit};

trait Orders {
    #[rate_limit(replenish = 10)]
    async fn list(&self) -> Result<(), RateLimited>;
}

fn main() {}
