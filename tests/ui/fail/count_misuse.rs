use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, algorithm = "fixed_window", count = Result::is_err)]
async fn windowed() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limit(replenish = 10, count = 3)]
async fn not_a_predicate() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
