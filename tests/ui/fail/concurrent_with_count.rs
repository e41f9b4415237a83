use redis_ratelimit::{RateLimited, rate_limit};

// A concurrency slot comes back when the call ends, whatever its outcome: nothing to count.
#[rate_limit(concurrent = 2, key = redis_ratelimit::Global, count = Result::is_err)]
async fn export() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
