use redis_ratelimit::rate_limit;

#[rate_limit(replenish = 10)]
struct Orders;

fn main() {}
