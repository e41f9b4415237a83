use redis_ratelimit::{Ip, RateLimited, rate_limit};

// How a shared limit's calls wait is the declaration's: every use waits alike.
#[rate_limit(shared = "search", key = Ip, wait = "2s")]
async fn suggest() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
