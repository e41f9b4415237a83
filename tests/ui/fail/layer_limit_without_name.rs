use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // A layer's limit has no function to be named after.
    let _ = layer_limit!(replenish = 10, unit = "minute", key = Ip);
}
