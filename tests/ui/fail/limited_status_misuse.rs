use redis_ratelimit::{Global, RateLimited, rate_limit};

// A refusal's status is an error status.
#[rate_limit(replenish = 10, unit = "month", key = Global, limited_status = 200)]
async fn monthly() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
