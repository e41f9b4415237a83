use std::fmt::Display;

use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10)]
async fn greeting() -> Result<impl Display, RateLimited> {
    Ok("hello")
}

#[rate_limit(replenish = 10)]
async fn numbers() -> Result<Box<dyn Iterator<Item = u64> + Send>, RateLimited> {
    Ok(Box::new(1..4))
}

fn main() {
    let _ = (greeting, numbers);
}
