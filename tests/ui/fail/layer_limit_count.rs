use redis_ratelimit::{Ip, layer_limit};

fn main() {
    // A layer's `count` reads the response's status, not a function's output.
    let _ = layer_limit!(name = "api", replenish = 10, key = Ip, count = Result::is_ok);
}
