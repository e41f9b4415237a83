use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // A layer's limit counts every request: `count` is about one call of a function.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, count = Result::is_ok);
}
