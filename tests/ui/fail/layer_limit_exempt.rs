use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // No call of a function to exempt.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, exempt = true);
}
