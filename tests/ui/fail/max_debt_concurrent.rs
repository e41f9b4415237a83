use redis_ratelimit::{Global, RateLimited, rate_limit};

// A concurrency limit holds slots, not tokens: it owes nothing.
#[rate_limit(concurrent = 2, key = Global, max_debt = 5)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
