use redis_ratelimit::{Header, RateLimited, rate_limit};

const API_KEY: &str = "x-api-key";

#[rate_limit(replenish = 10, key = Header("x-api-key"))]
async fn by_api_key() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, key = Header(API_KEY))]
async fn by_api_key_const() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, key = redis_ratelimit::Global)]
async fn one_bucket() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let _ = (by_api_key, by_api_key_const, one_bucket);
}
