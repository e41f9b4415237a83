use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 1, unit = "second")]
async fn per_second() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, unit = "minute")]
async fn per_minute() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, unit = "hour")]
async fn per_hour() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 1, unit = "day")]
async fn per_day() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let _ = (per_second, per_minute, per_hour, per_day);
}
