use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, key = "all", cost = size_mb)]
async fn upload(size_mb: f64) -> Result<f64, RateLimited> {
    Ok(size_mb)
}

fn main() {}
