use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, wait = true)]
async fn not_a_string() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, wait = "2 hours")]
async fn unknown_unit() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, wait = "1.5s")]
async fn a_fraction() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, wait = "0ms")]
async fn zero() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, wait = "1441m")]
async fn over_a_day() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, wait = "+2s")]
async fn a_sign() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 4294967295, burst = 1, wait = "1m")]
async fn longer_than_exact_arithmetic_allows() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
