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

// Calendar periods: a fixed window whose windows are the weeks, the months.
#[rate_limit(replenish = 1000, unit = "week")]
async fn per_week() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10000, unit = "month", algorithm = "fixed_window")]
async fn per_month() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let _ = (per_second, per_minute, per_hour, per_day, per_week, per_month);
}
