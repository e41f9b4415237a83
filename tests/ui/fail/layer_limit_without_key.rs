use redis_ratelimit::layer_limit;

fn main() {
    // A layer's limit has no arguments to key it by.
    let _ = layer_limit!(name = "api", replenish = 10, unit = "minute");
}
