use redis_ratelimit::{RateLimited, rate_limit};

#[rate_limit(replenish = 10, key = tenant)]
async fn upload(tenant_id: u64) -> Result<u64, RateLimited> {
    Ok(tenant_id)
}

fn main() {}
