use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // No name: a layer's limit has no function to be named after.
    let _ = layer_limit!(replenish = 10, unit = "minute", key = Ip);
    // No key.
    let _ = layer_limit!(name = "api", replenish = 10, unit = "minute");
    // What is about one call of a function.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, wait = "1s", count = Result::is_ok);
    // A key that is not a resolver.
    let _ = layer_limit!(name = "api", replenish = 10, key = 42);
}
