use redis_ratelimit::{Global, Ip, RateLimited, rate_limit};

/// 10 per second per client, and 100 per second in all.
#[rate_limit(replenish = 10, key = Ip, name = "search.per_client")]
#[rate_limit(replenish = 100, key = Global, name = "search.total")]
async fn search(query: &str) -> Result<usize, RateLimited> {
    Ok(query.len())
}

fn main() {
    let _ = search;
}
