use redis_ratelimit::rate_limit;

#[rate_limit(replenish = 10)]
async fn record_visit() {}

fn main() {}
