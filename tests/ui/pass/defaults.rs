use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10)]
async fn list_orders() -> Result<Vec<u64>, RateLimited> {
    Ok(vec![1, 2, 3])
}

fn main() {
    let _ = list_orders;
}
