use redis_ratelimit::rate_limit;

#[rate_limit(replenish = 10)]
async fn list_orders() -> Vec<u64> {
    Vec::new()
}

fn main() {}
